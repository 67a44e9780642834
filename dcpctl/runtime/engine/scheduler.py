"""Policy: admission by free virtual pages, chunked prefill first, then batched decode.

Deterministic from its inputs, so every rank of an attention-DP replica builds the same batches.
Admission reserves a request's whole KV (prompt + max_new_tokens - 1 positions): no preemption,
so admission by free virtual pages is exact.  At most `max_running` requests run at once; a
cancelled request leaves the queue or frees its pages at the next step boundary.
"""
from __future__ import annotations

from collections import deque
from typing import Any

from dcpctl.runtime.attention.dcp import SeqChunk
from dcpctl.runtime.engine.request import Sequence
from dcpctl.runtime.fits import misfit
from dcpctl.runtime.kv.allocator import VirtualAllocator


class SchedulerError(RuntimeError):
    pass


class Scheduler:
    def __init__(self, alloc: VirtualAllocator, chunk_size: int, max_running: int | None = None,
                 state_pool: Any = None) -> None:
        self.alloc = alloc
        self.state_pool = state_pool  # hybrids: a request-state pool (can_admit/admit/release), else None
        self.chunk_size = chunk_size if chunk_size > 0 else 1 << 62
        self.max_running = max_running if max_running and max_running > 0 else 1 << 62
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.cache: Any = None  # HiCache (engine/hicache.py): keep/reclaim/admit hooks, else None
        self._index: dict[int, Sequence] = {}   # rid -> running sequence (seq()'s cache)

    def add(self, seq: Sequence) -> None:
        if not seq.prompt:
            raise SchedulerError(f"request {seq.rid}: empty prompt_ids")
        if seq.params.max_new_tokens < 1:
            raise SchedulerError(f"request {seq.rid}: max_new_tokens ({seq.params.max_new_tokens}) < 1")
        bad = misfit(len(seq.prompt), seq.params.max_new_tokens, self.alloc.virtual_capacity, extra=seq.kv_extra)
        if bad:
            raise SchedulerError(f"request {seq.rid}: {bad.sentence()}")
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def _admit(self) -> None:
        while (self.waiting and len(self.running) < self.max_running
               and self._can_allocate(self.waiting[0].max_kv)
               and (self.state_pool is None or self.state_pool.can_admit())):
            seq = self.waiting.popleft()
            self.alloc.allocate(seq.rid, seq.max_kv)
            if self.cache is not None:
                self.cache.admit(seq)  # a cached prompt prefix is restored, not prefilled
            if self.state_pool is not None:
                self.state_pool.admit(seq.rid)
            self.running.append(seq)
        if self.waiting and not self.running:
            seq = self.waiting[0]
            raise SchedulerError(f"request {seq.rid}: needs {self.alloc.pages_for(seq.max_kv)} pages, "
                                 f"free_pages = {self.alloc.free_pages}, nothing running to free more")

    def adopt(self, seq: Sequence) -> None:
        """Run an already-allocated request at once, bypassing the queue (PD decode: its prompt KV arrived)."""
        self.running.append(seq)

    def _can_allocate(self, num_tokens: int) -> bool:
        if self.alloc.can_allocate(num_tokens):
            return True
        return self.cache is not None and self.cache.reclaim(self.alloc.pages_for(num_tokens))

    def next_batch(self) -> list[SeqChunk]:
        """Prefill chunks (up to chunk_size tokens) if any prompt is unfinished, else one decode step."""
        self._admit()
        prefill = [s for s in self.running if s.prefilling]
        if not prefill:
            return [SeqChunk(s.rid, s.computed, 1) for s in self.running if not s.draining]
        chunks, budget = [], self.chunk_size
        for s in prefill:
            n = min(len(s.prompt) - s.computed, budget)
            if n == 0:
                break
            chunks.append(SeqChunk(s.rid, s.computed, n))
            budget -= n
        return chunks

    def seq(self, rid: int) -> Sequence:
        """The running sequence `rid`: O(1) per decode row (a cache checked for staleness), else a scan."""
        s = self._index.get(rid)
        if s is None or s.finished or s.rid != rid:
            s = next(s for s in self.running if s.rid == rid)
            self._index[rid] = s
        return s

    def samples(self, chunks: list[SeqChunk]) -> list[tuple[int, int]]:
        """(row of the chunk's last token, rid) for chunks that reach their sequence's end."""
        out, row = [], 0
        for ch in chunks:
            row += ch.num_tokens
            if ch.start + ch.num_tokens == self.seq(ch.rid).num_tokens:
                out.append((row - 1, ch.rid))
        return out

    def advance(self, chunks: list[SeqChunk]) -> None:
        for ch in chunks:
            self.seq(ch.rid).computed += ch.num_tokens

    def cancel(self, rid: int) -> Sequence | None:
        """Drop request `rid` from the queue or free its pages; None when it is not here (done)."""
        for seq in self.waiting:
            if seq.rid == rid:
                self.waiting.remove(seq)
                seq.finished, seq.finish_reason = True, "abort"
                return seq
        for seq in self.running:
            if seq.rid == rid:
                seq.finish_reason = "abort"
                self.finish(seq)
                return seq
        return None

    def finish(self, seq: Sequence) -> None:
        seq.finished = True
        self.running.remove(seq)
        self._index.pop(seq.rid, None)
        self.alloc.free(seq.rid, self.cache.keep(seq) if self.cache is not None else frozenset())
        self.alloc.check_counts()     # O(requests); the full O(tokens) check runs when the engine drains
        if self.state_pool is not None:
            self.state_pool.release(seq.rid)
            self.state_pool.check_integrity()
