"""Policy: what each step carries, admission on the KV a request holds, and retraction when the pool runs out.

Deterministic from allocator ints and token counts, so every rank of an attention-DP replica builds the same
batches and retracts the same requests; the allocator is identical on every rank of a DCP group, so freeing a
retracted request's pages on every rank needs no message.  The launch config's `schedule` section
(dcpctl/launch/schedule.py) sets the knobs:

- Steps.  Mixed (SGLang's --enable-mixed-chunk, vLLM's token budget): one decode token of every running
  request plus prefill chunks, first come first served, up to the step's tokens (--chunked-prefill-size, at
  most --max-prefill-tokens).  The budget bounds one forward's tokens: where the decodes share the chunks'
  forward (SGLang's mixed chunk) they count against it and at least one prefill token goes in; where the
  engine replays them as their own decode graph beside the chunks (engine/mixed.py, `decodes_apart`) the
  chunks get the whole budget, so a prompt's chunks are the same as without decodes (a 16K prompt at 8,192
  is two chunks of 8,192, not 8,184 + 8,184 + 16: no extra step, no prefix cut off the kernels' key
  quantum).  Not mixed: prefill chunks alone while a prompt is unfinished, else one decode token per
  request.  Without chunking (-1) a prompt is never split: whole prompts while they fit, the first one always.
- Admission on held KV.  A request holds the pages of the positions it has written plus its next step's
  (its prompt, at admission).  The head of the queue is admitted when the free pages cover it and every
  running request `decode_headroom` more positions (each capped at its max_new_tokens); a retracted request
  returns once its whole max_new_tokens fits.
- Retraction (SGLang's retract-decode).  When a step cannot extend every running request, requests are
  retracted, fewest output tokens first, then the longest prompt, until the rest have the headroom or one is
  left.  A retracted request frees its pages (a HiCache keeps its full pages) and its state slot, goes back
  to the front of the queue, and on return recomputes its prompt plus the tokens it produced; its next token
  comes from that prefill's last row, so a stream pauses, never repeats or skips, and greedy output does not
  change.  No request is admitted in a step that retracted.

A request must fit the whole pool alone (runtime/fits.py), so the last one standing always can go on.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Callable

from dcpctl.contract.launch_config import ScheduleSection
from dcpctl.runtime.attention.dcp import SeqChunk
from dcpctl.runtime.engine.batch import sample_rows
from dcpctl.runtime.engine.request import Sequence
from dcpctl.runtime.fits import misfit
from dcpctl.runtime.kv.allocator import VirtualAllocator

UNBOUNDED = 1 << 62


class SchedulerError(RuntimeError):
    pass


class Scheduler:
    def __init__(self, alloc: VirtualAllocator, chunk_size: int, max_running: int | None = None,
                 state_pool: Any = None, schedule: ScheduleSection | None = None) -> None:
        self.alloc = alloc
        self.state_pool = state_pool  # hybrids: a request-state pool (can_admit/admit/release), else None
        self.schedule = schedule if schedule is not None else ScheduleSection()
        self.chunk_size = chunk_size if chunk_size > 0 else UNBOUNDED
        self.split = chunk_size > 0                      # prompts may be split into chunks
        self.step_tokens = min(self.chunk_size, self.schedule.max_prefill_tokens)
        self.max_running = max_running if max_running and max_running > 0 else UNBOUNDED
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.cache: Any = None  # HiCache (engine/hicache.py): keep/reclaim/admit hooks, else None
        self.on_retract: list[Callable[[Sequence], None]] = []   # f(seq) after its pages are freed (spec)
        self.before_retract: Callable[[], None] | None = None    # once before choosing whom to retract
                                                                 # (engine)
        self.retractions = 0                             # requests retracted so far (for /metrics)
        self.decodes_apart = 0   # up to this many decodes run as their own graph replay beside a step's
                                 # chunks
        self._index: dict[int, Sequence] = {}   # rid -> running sequence: every running one, none other

    def add(self, seq: Sequence) -> None:
        if not seq.prompt:
            raise SchedulerError(f"request {seq.rid}: empty prompt_ids")
        if seq.params.max_new_tokens < 1:
            raise SchedulerError(f"request {seq.rid}: max_new_tokens ({seq.params.max_new_tokens}) < 1")
        bad = misfit(len(seq.prompt), seq.params.max_new_tokens, self.alloc.virtual_capacity,
                     extra=seq.kv_extra)
        if bad:
            raise SchedulerError(f"request {seq.rid}: {bad.sentence()}")
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # -- pages ------------------------------------------------------------------------------------
    def _growth(self, seqs: list[Sequence], ahead: int) -> int:
        """Pages `seqs` still need to hold kv_next(ahead) positions each (a waiting one holds none)."""
        need, page = 0, self.alloc.page_tokens
        for s in seqs:
            held = len(self.alloc.pages(s.rid)) if s.rid in self._index else 0
            n = s.kv_next(ahead)
            if n > held * page:
                need += -(-n // page) - held
        return need

    def _fits(self, seqs: list[Sequence], ahead: int, more: int = 0) -> bool:
        """Whether the free pages (after a HiCache reclaim) cover `seqs` growing `ahead` steps, plus `more`
        pages."""
        need = self._growth(seqs, ahead) + more
        if need <= self.alloc.free_pages:
            return True
        return self.cache is not None and self.cache.reclaim(need)

    def _live(self) -> list[Sequence]:
        return [s for s in self.running if not s.draining]

    # -- admission and retraction -----------------------------------------------------------------
    def admits(self, seq: Sequence) -> bool:
        """The admission rule: whether `seq`, the head of the queue, starts now (module docstring: admission
        on held KV; a HiCache may reclaim pages to make it fit)."""
        if len(self.running) >= self.max_running:
            return False
        if self.state_pool is not None and not self.state_pool.can_admit():
            return False
        headroom = self.schedule.decode_headroom
        # a retracted request returns once its whole max_new_tokens fits, so the shortage that retracted it
        # does not retract it again at once
        mine = self._growth([seq], UNBOUNDED if seq.retracted else headroom)
        return self._fits(self._live(), headroom, mine) or (not self.running and self._fits([seq], 1))

    def _admit(self) -> None:
        while self.waiting and self.admits(self.waiting[0]):
            seq = self.waiting.popleft()
            self.alloc.allocate(seq.rid, seq.kv_next())
            if self.cache is not None:
                self.cache.admit(seq)  # a cached prefix is restored, not prefilled
            if self.state_pool is not None:
                self.state_pool.admit(seq.rid)
            self.running.append(seq)
            self._index[seq.rid] = seq
        if self.waiting and not self.running:
            seq = self.waiting[0]
            raise SchedulerError(f"request {seq.rid}: needs {self.alloc.pages_for(seq.kv_next())} pages, "
                                 f"free_pages = {self.alloc.free_pages}, nothing running to free more")

    def _make_room(self) -> list[Sequence]:
        """Retract until every running request can take its next step with the headroom (module docstring)."""
        if self._fits(self._live(), 1):
            return []
        if self.before_retract is not None:    # the engine reads its step in flight: some may finish
            self.before_retract()
            if self._fits(self._live(), 1):
                return []
        live = self._live()
        # SGLang's order, last = first out: fewest output tokens, then the longest prompt
        live.sort(key=lambda s: (len(s.output), -len(s.prompt)), reverse=True)
        out = []
        while len(live) > 1 and not self._fits(live, self.schedule.decode_headroom):
            out.append(live.pop())
            self._retract(out[-1])
        if not self._fits(live, 1):
            raise SchedulerError(f"request {live[0].rid}: needs {self._growth(live, 1)} more pages for its "
                                 f"next step, free_pages = {self.alloc.free_pages}, nothing left to retract")
        for seq in sorted(out, key=lambda s: s.rid, reverse=True):   # back to the front, oldest first
            self.waiting.appendleft(seq)
        return out

    def _retract(self, seq: Sequence) -> None:
        self._release(seq)
        seq.computed, seq.prefill_to = 0, seq.num_tokens   # recompute prompt + output on return
        seq.retracted += 1
        self.retractions += 1
        for hook in self.on_retract:
            hook(seq)

    def _release(self, seq: Sequence) -> None:
        """Drop a running request and free its pages (a HiCache keeps its full ones) and its state slot."""
        self.running.remove(seq)
        self._index.pop(seq.rid, None)
        self.alloc.free(seq.rid, self.cache.keep(seq) if self.cache is not None else frozenset())
        self.alloc.check_counts()     # O(requests); the full O(tokens) check runs when the engine drains
        if self.state_pool is not None:
            self.state_pool.release(seq.rid)
            self.state_pool.check_integrity()

    def adopt(self, seq: Sequence) -> None:
        """Run an already-allocated request at once, bypassing the queue (PD decode: its prompt KV
        arrived)."""
        self.running.append(seq)
        self._index[seq.rid] = seq

    # -- steps ------------------------------------------------------------------------------------
    def next_batch(self) -> list[SeqChunk]:
        """This step's chunks: decodes and prefill chunks as the module docstring says; their pages held."""
        if not self._make_room():
            self._admit()
        prefill = [s for s in self.running if s.prefilling]
        decode = [] if prefill and not self.schedule.mixed_chunk else \
            [s for s in self.running if not s.prefilling and not s.draining]
        chunks = [SeqChunk(s.rid, s.computed, 1) for s in decode]
        shared = len(decode) if len(decode) > self.decodes_apart else 0    # decodes in the chunks' forward
        chunks += self._prefill_chunks(prefill, max(1, self.step_tokens - shared))
        for s in decode + prefill[:len(chunks) - len(decode)]:   # the chunks' sequences, in order
            self.alloc.grow(s.rid, s.kv_next())   # _make_room checked that the pages fit
        return chunks

    def _prefill_chunks(self, prefill: list[Sequence], budget: int) -> list[SeqChunk]:
        chunks: list[SeqChunk] = []
        for s in prefill:
            left = s.prefill_to - s.computed
            n = min(left, budget) if self.split else (left if left <= budget or not chunks else 0)
            if n <= 0:
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

    def seqs_of(self, chunks: list[SeqChunk]) -> list[Sequence]:
        """Each chunk's running sequence, in order."""
        return [self.seq(ch.rid) for ch in chunks]

    def samples(self, chunks: list[SeqChunk]) -> list[tuple[int, int]]:
        """(row of the chunk's last token, rid) for chunks that reach their sequence's end
        (batch.sample_rows)."""
        rows, seqs = sample_rows(chunks, self.seqs_of(chunks))
        return [(r, s.rid) for r, s in zip(rows, seqs)]

    def advance(self, chunks: list[SeqChunk], seqs: list[Sequence] | None = None) -> None:
        for ch, seq in zip(chunks, seqs or self.seqs_of(chunks)):
            seq.computed += ch.num_tokens

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
        self._release(seq)
