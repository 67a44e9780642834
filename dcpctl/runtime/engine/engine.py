"""Continuous batching over one attention-DP replica, in lockstep with the whole TP group.

Incremental API (what the server drives): submit(rid, prompt, params) and cancel(rid) between
steps, step() -> this replica's events.  generate() is built on the same three calls.

Each step: the scheduler picks prefill chunks or one decode token per running request, the engine
builds the DCP attention context from allocator state, runs the model, samples the sequences
whose chunk reached their end, and frees finished requests.  Request `rid` goes to replica
`rid % attn_dp_size`; a replica with nothing to do still runs forward with T = 0 while any
replica has work (`busy` says whether the last step ran).
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import Tensor

from dcpctl.runtime.attention.dcp import SeqChunk, build_context
from dcpctl.runtime.engine.events import Event, ReplicaStats
from dcpctl.runtime.engine.hicache import HiCache
from dcpctl.runtime.engine.request import SamplingParams, Sequence
from dcpctl.runtime.engine.sample import Sampler
from dcpctl.runtime.engine.scheduler import Scheduler
from dcpctl.runtime.engine.spec import make_speculative, summarize
from dcpctl.runtime.kv.allocator import VirtualAllocator, local_len
from dcpctl.runtime.kv.pool import KVPool
from dcpctl.runtime.parallel import ParallelState

DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16,
          "float16": torch.float16}


def model_dims(model: Any) -> tuple[int, int, int]:
    """(num_layers, kv_lora_rank, latent row size R) from model.cfg / model.config."""
    cfg = getattr(model, "cfg", None) or getattr(model, "config", None)
    if cfg is None:
        raise TypeError(f"{type(model).__name__} has no .cfg/.config with the MLA dimensions")
    layers = getattr(cfg, "num_layers", None) or getattr(cfg, "num_hidden_layers")
    return layers, cfg.kv_lora_rank, cfg.kv_lora_rank + cfg.qk_rope_head_dim


class Engine:
    """Runs generate() on every rank of the world; see module docstring."""

    def __init__(self, model: Any, ps: ParallelState, launch_cfg: dict, eos_token_id: Any = None,
                 max_running: int | None = None) -> None:
        kv, topo = launch_cfg["kv"], launch_cfg["topology"]
        self.model, self.ps = model, ps
        self.decisions = launch_cfg.get("decisions", {})
        self.dp_size = int(topo.get("attn_dp_size", 1))
        self.device = torch.device(launch_cfg.get("device", "cpu"))
        self.eos = set(eos_token_id if isinstance(eos_token_id, (list, tuple)) else
                       [] if eos_token_id is None else [eos_token_id])
        layers, self.v_dim, row = model_dims(model)
        layers = getattr(model, "kv_layers", layers)  # hybrids: only MLA layers keep latent KV
        page = int(kv["page_size"])
        self.alloc = VirtualAllocator(int(kv["capacity_tokens"]), page, ps.dcp.size)
        self.pool = KVPool(layers, self.alloc.num_pages * page, row,
                           DTYPES[launch_cfg["model"]["dtype"]], self.device)
        state_pool = getattr(model, "kda_pool", None)  # hybrids: request-indexed KDA state, never striped
        if state_pool is not None and max_running and state_pool.slots != max_running:
            model.set_kda_capacity(max_running)
            state_pool = model.kda_pool
        self.sched = Scheduler(self.alloc, int(kv.get("chunked_prefill_size", -1)), max_running, state_pool)
        self.hicache = HiCache.from_launch_config(launch_cfg, self.alloc, self.pool, ps.dcp, state_pool)
        self.sched.cache = self.hicache           # None unless launch_cfg["hicache"]
        self.finish_hooks: list[Any] = []         # f(seq) before a finished request's pages are freed (PD)
        self.sampler = Sampler()
        self.spec = make_speculative(launch_cfg, self)  # None unless launch_cfg["speculative"]
        self.busy = False                        # whether any replica ran the last step
        self.kv_rows = self.kv_bytes_read = 0     # rows held by finished requests; bytes attended
        self.exchange_seconds = 0.0               # time in DCP collectives (for /metrics)
        self._results: dict[int, dict] | None = None  # generate() only: rid -> result

    def owns(self, rid: int) -> bool:
        return rid % self.dp_size == self.ps.attn_dp_index

    def submit(self, rid: int, prompt: list[int], params: SamplingParams) -> None:
        """Queue a request (only on its replica); raises SchedulerError for an impossible one."""
        if self.owns(rid):
            extra = self.spec.kv_extra if self.spec else 0  # verification writes K rows past plain decode
            self.sched.add(Sequence(rid, list(prompt), params, kv_extra=extra))

    def cancel(self, rid: int) -> bool:
        """Drop a queued or running request and free its pages; False when it is not here."""
        seq = self.sched.cancel(rid)
        self.sampler.forget(rid)
        if seq is not None and self.spec:
            self.spec.release(seq)
        return seq is not None

    def cancel_all(self) -> None:
        for seq in list(self.sched.waiting) + list(self.sched.running):
            self.cancel(seq.rid)

    def stats(self) -> ReplicaStats:
        return ReplicaStats(len(self.sched.waiting), len(self.sched.running), self.alloc.free_pages,
                            self.alloc.num_pages)

    def check_drained(self) -> None:
        """Allocator integrity holds and every page is free (after cancel_all)."""
        self.alloc.check_integrity()
        if self.alloc.free_pages + self.alloc.held_pages != self.alloc.num_pages or self.alloc.requests():
            raise RuntimeError(f"free_pages({self.alloc.free_pages}) != num_pages({self.alloc.num_pages}) "
                               f"after draining; requests still holding pages: {self.alloc.requests()}")

    def generate(self, requests: list[dict], progress: Callable[[int, int], None] | None = None) -> dict:
        """Run requests to completion; every rank returns {"outputs": [...], "stats": {...}}.

        progress(done, total) is called as this replica's requests finish (a CLI progress bar)."""
        for i, req in enumerate(requests):
            self.submit(i, req["prompt_ids"], SamplingParams.from_dict(req))
        self._results, steps = {}, 0
        mine = sum(self.owns(i) for i in range(len(requests)))
        while True:
            self.step()
            if progress is not None:
                progress(len(self._results), mine)
            if not self.busy:
                break
            steps += 1
        self.alloc.check_integrity()   # once per run: every slot's owner (finish checks page counts only)
        return self._collect(len(requests), steps)

    def _any_replica_busy(self, busy: bool) -> bool:
        if self.dp_size == 1 or self.ps.tp.group is None:
            return busy  # one replica: nothing to agree on, no device round trip per step
        flag = torch.tensor([int(busy)], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.ps.tp.group)
        return bool(flag.item())

    def step(self) -> list[Event]:
        """One batch in lockstep with every rank; this replica's new tokens (and finishes)."""
        chunks = self.sched.next_batch() if self.sched.has_work() else []
        self.busy = self._any_replica_busy(bool(chunks))
        if not self.busy:
            return []
        if self.spec and chunks and not self.sched.seq(chunks[0].rid).prefilling:
            return self.spec.step(self, chunks)  # a decode batch: propose K, verify K + 1 rows per request
        hidden = self.forward(chunks, self._input_ids(chunks))
        picks = self.sched.samples(chunks)
        rows = torch.tensor([r for r, _ in picks], dtype=torch.int64, device=self.device)
        logits = self.model.logits(hidden.index_select(0, rows))
        self.sched.advance(chunks)
        return self._accept(logits, [self.sched.seq(rid) for _, rid in picks])

    def forward(self, chunks: list[SeqChunk], ids: list[int]) -> Tensor:
        """One target forward over allocated `chunks` fed `ids`; counts KV bytes read and exchange time."""
        # ids: T host ints -> hidden [T, D]
        ctx = build_context(self.alloc, self.pool, self.ps.dcp, self.decisions, chunks, self.v_dim)
        hidden = self.model.forward(torch.tensor(ids, dtype=torch.int64, device=self.device), ctx.positions, ctx)
        self.kv_bytes_read += ctx.kv_bytes_read
        self.exchange_seconds += ctx.exchange_seconds
        return hidden

    def _input_ids(self, chunks: list[SeqChunk]) -> list[int]:
        ids: list[int] = []
        for ch in chunks:
            ids += self.sched.seq(ch.rid).tokens[ch.start:ch.start + ch.num_tokens]
        return ids

    def _accept(self, logits: Tensor, seqs: list[Sequence]) -> list[Event]:
        # logits: [N, V] for the N sequences that produce a token this step
        toks, lps = self.sampler(logits, seqs)
        toks = self._broadcast(toks)
        return [self.record(seq, tok, lp) for seq, tok, lp in zip(seqs, toks, lps)]

    def record(self, seq: Sequence, tok: int, lp: float) -> Event:
        """Append one emitted token; at EOS or max_new_tokens the request finishes (pages freed)."""
        seq.output.append(tok)
        seq.logprobs.append(lp)
        if tok in self.eos and not seq.params.ignore_eos:
            seq.finish_reason = "stop"
        elif len(seq.output) >= seq.params.max_new_tokens:
            seq.finish_reason = "length"
        if seq.finish_reason:
            self._finish(seq)
        return Event(seq.rid, tok, lp, seq.finish_reason)

    def _broadcast(self, toks: list[int]) -> list[int]:
        # the replica's first rank decides; others already agree, this only guards against drift
        if self.ps.attn_tp.size == 1:
            return toks
        t = torch.tensor(toks, dtype=torch.int64, device=self.device)
        dist.broadcast(t, src=self.ps.attn_tp.ranks[0], group=self.ps.attn_tp.group)
        return t.tolist()

    def _finish(self, seq: Sequence) -> None:
        c, r = self.ps.dcp.size, self.ps.dcp.rank
        self.kv_rows += local_len(seq.computed, r, c)  # the rows this rank owns of the computed positions
        if self._results is not None:
            self._results[seq.rid] = seq.result()
        for hook in self.finish_hooks:
            hook(seq)
        self.sched.finish(seq)
        self.sampler.forget(seq.rid)
        if self.spec:
            self.spec.release(seq)

    def _collect(self, n: int, steps: int) -> dict:
        done = self._results or {}
        mine = (done if self.ps.attn_tp.rank == 0 else {}, self.kv_rows, self.kv_bytes_read,
                self.spec.counters if self.spec else None)
        parts = [mine]
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            parts = [None] * dist.get_world_size()
            dist.all_gather_object(parts, mine)
        done = {k: v for p in parts for k, v in p[0].items()}
        missing = sorted(set(range(n)) - set(done))
        if missing:
            raise RuntimeError(f"requests {missing} produced no result")
        stats = {"kv_rows_per_rank": [p[1] for p in parts], "kv_bytes_read_per_rank": [p[2] for p in parts],
                 "steps": steps}
        if self.spec:
            stats["spec"] = summarize([p[3] for p in parts], self.spec.k)
        return {"outputs": [done[i] for i in range(n)], "stats": stats}
