"""Continuous batching over one attention-DP replica, in lockstep with the whole TP group.

Incremental API (what the server drives): submit(rid, prompt, params) and cancel(rid) between
steps, step() -> this replica's events.  generate() is built on the same three calls.

Each step: the scheduler picks one decode token per running request plus prefill chunks (or retracts
requests when the pool runs out; engine/scheduler.py), the engine builds the DCP attention context from
allocator state, runs the model (decode-only steps replay a CUDA graph, engine/graph_runner.py; a mixed
step's decodes replay theirs beside an eager forward of its prompt chunks, engine/mixed.py), samples the
sequences whose chunk reached their end, and frees finished requests.  Request `rid` goes to replica
`rid % attn_dp_size`; a replica with nothing to do still runs forward with T = 0 while any
replica has work (`busy` says whether the last step ran).
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import Tensor

from dcpctl.contract.launch_config import LaunchConfig
from dcpctl.runtime.attention.dcp import SeqChunk, build_context, kv_rows
from dcpctl.runtime.collectives import broadcast, gather_sizes
from dcpctl.runtime.attention.layout import host_ints, to_device
from dcpctl.runtime.boot import DTYPES
from dcpctl.runtime.engine import mixed
from dcpctl.runtime.engine.events import Event, ReplicaStats
from dcpctl.runtime.engine.graph_runner import GraphDecode, Progress, prefill_graphs_plan, why_not
from dcpctl.runtime.engine.hicache import HiCache
from dcpctl.runtime.engine.model import ServedModel, latent_dims, state_pool
from dcpctl.runtime.engine.pipeline import PENDING, InFlight, launch_sampling, resolve
from dcpctl.runtime.engine.request import SamplingParams, Sequence
from dcpctl.runtime.engine.sample import Sampler, greedy_all
from dcpctl.runtime.engine.scheduler import Scheduler
from dcpctl.runtime.engine.spec import make_speculative, summarize
from dcpctl.runtime.engine.warm_up import ladder, warm_up_prompts
from dcpctl.runtime.kv.allocator import VirtualAllocator, local_len, owned_rows
from dcpctl.runtime.kv.pool import KVPool
from dcpctl.runtime.notes import note_once
from dcpctl.runtime.parallel import ParallelState

RankPart = tuple[dict[int, dict], int, int, Any]   # (results, kv_rows, kv_bytes_read, spec counters) of one rank


class Engine:
    """Runs generate() on every rank of the world; see module docstring."""

    def __init__(self, model: ServedModel, ps: ParallelState, cfg: LaunchConfig) -> None:
        kv = cfg.kv
        self.model, self.ps = model, ps
        self.decisions = cfg.decisions
        self.dp_size = cfg.topology.attn_dp_size
        self.device = torch.device(cfg.device)
        self.eos = set(cfg.eos_token_ids)
        layers, self.v_dim, row = latent_dims(model)
        self.alloc = VirtualAllocator(kv.capacity_tokens, kv.page_size, ps.dcp.size)
        sizes = list(cfg.cuda_graph.batch_sizes) if cfg.cuda_graph is not None else []
        self.trash_slot = self.alloc.num_pages * kv.page_size   # a spare page: decode graphs write pad rows there
        self.pool = KVPool(layers, (self.alloc.num_pages + int(bool(sizes))) * kv.page_size, row,
                           DTYPES[cfg.model.dtype], self.device)
        self.state_pool = state_pool(model, kv.max_running_requests)  # hybrids: request-indexed KDA state
        self.sched = Scheduler(self.alloc, kv.chunked_prefill_size, kv.max_running_requests, self.state_pool,
                               cfg.schedule)
        note_once(self.sched.schedule.reason)
        self.hicache = HiCache.from_section(cfg.hicache, self.alloc, self.pool, kv.page_size, ps.dcp, self.state_pool)
        self.sched.cache = self.hicache           # None unless the launch config has `hicache`
        self.finish_hooks: list[Any] = []         # f(seq) before a finished request's pages are freed (PD)
        self.sampler = Sampler()
        self.spec = make_speculative(cfg.speculative, self, kv.page_size)  # None without a `speculative` section
        if self.spec:
            self.sched.on_retract.append(lambda seq: self.spec.release(seq, count=False))  # rebuilt on return
        off = why_not(model, self.spec, sizes, self.state_pool)
        if off:
            note_once(off)
        self.graphs = GraphDecode(self, sizes, cfg.cuda_graph.reason) if sizes and not off else None  # warm_up()
        self.prefill_graphs = prefill_graphs_plan(model, cfg.cuda_graph, self.device)   # (tokens, reason) or None
        self._pipeline = self.graphs is not None and self.dp_size == 1   # engine/pipeline.py
        self.split_off = mixed.split_off(self.graphs, self.dp_size)       # engine/mixed.py
        self._inflight: InFlight | None = None
        self._early: list[Event] = []             # events of a step in flight read before a retraction
        self.sched.before_retract = self._resolve_early
        self.busy = False                        # whether any replica ran the last step
        self.last_step: tuple[str, list[SeqChunk]] = ("idle", [])  # (kind, its chunks): the step trace (loop.py)
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
        if self._inflight is not None:    # its tokens are dropped with their requests
            if self._inflight.event is not None:
                self._inflight.event.synchronize()
            self._inflight = None
        for seq in list(self.sched.waiting) + list(self.sched.running):
            self.cancel(seq.rid)

    def stats(self) -> ReplicaStats:
        return ReplicaStats(len(self.sched.waiting), len(self.sched.running), self.alloc.free_pages,
                            self.alloc.num_pages, self.sched.retractions)

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
        self._results = {}
        mine = sum(self.owns(i) for i in range(len(requests)))
        results = self._results
        steps = self.drain(None if progress is None else lambda: progress(len(results), mine))
        self.alloc.check_integrity()   # once per run: every slot's owner (finish checks page counts only)
        outputs, parts = self.collect(self._results if self.ps.attn_tp.rank == 0 else {}, len(requests))
        stats = {"kv_rows_per_rank": [p[1] for p in parts], "kv_bytes_read_per_rank": [p[2] for p in parts],
                 "steps": steps}
        if self.spec:
            stats["spec"] = summarize([p[3] for p in parts], self.spec.k)
        return {"outputs": outputs, "stats": stats}

    def drain(self, after_step: Callable[[], None] | None = None,
              before_step: Callable[[], None] | None = None) -> int:
        """Step until no replica has work; returns the steps that ran a batch (the batch runner of plain and PD)."""
        steps = 0
        while True:
            if before_step is not None:
                before_step()
            self.step()
            if after_step is not None:
                after_step()
            if not self.busy:
                return steps
            steps += 1

    def collect(self, results: dict[int, dict], n: int) -> tuple[list[dict], list[RankPart]]:
        """Every rank: requests 0..n-1's results (each given by one rank) and every rank's counters, in rank order."""
        mine: RankPart = (results, self.kv_rows, self.kv_bytes_read, self.spec.counters if self.spec else None)
        parts: list[Any] = [mine]
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            parts = [None] * dist.get_world_size()
            dist.all_gather_object(parts, mine)
        done = {k: v for p in parts for k, v in p[0].items()}
        missing = sorted(set(range(n)) - set(done))
        if missing:
            raise RuntimeError(f"requests {missing} produced no result")
        return [done[i] for i in range(n)], parts

    def adopt(self, seq: Sequence, rows: Tensor | None) -> bool:
        """Run a request whose prompt KV was computed elsewhere (PD decode); False when its pages do not fit.

        rows: [layers, n, R], this rank's rows of the prompt positions it owns, in position order."""
        if not self.alloc.can_allocate(seq.max_kv):
            return False
        slots = self.alloc.allocate(seq.rid, seq.max_kv)
        c, r = self.ps.dcp.size, self.ps.dcp.rank
        phys = owned_rows(slots, 0, len(seq.prompt), r, c)
        if phys:
            idx = torch.tensor(phys, dtype=torch.int64, device=self.pool.kv.device)
            self.pool.kv.index_copy_(1, idx, rows.to(self.pool.kv.dtype))
        self.sched.adopt(seq)
        return True

    def owned_prompt_rows(self, seq: Sequence) -> Tensor:
        """[layers, n, R]: this rank's KV rows of seq's prompt positions it owns, in position order (PD prefill)."""
        c, r = self.ps.dcp.size, self.ps.dcp.rank
        slots = self.alloc.slots(seq.rid)
        phys = torch.tensor(owned_rows(slots, 0, len(seq.prompt), r, c), dtype=torch.int64,
                            device=self.pool.kv.device)
        return self.pool.kv.index_select(1, phys)

    def warm_up(self, progress: Progress | None = None, prompts: bool = False,
                prefill_progress: Progress | None = None) -> None:
        """Before serving: capture the decode graphs and (prompts=True, on CUDA) run one short request per
        replica for each prompt length of `warm_up_lengths` (each its own first token: no prefix is reused),
        then every GEMM those prefills used over gemm_warm's grid of token counts.  Every rank calls it
        together; counters are reset after.  On CUDA, first, the block-FP8 kernels all of that launches are
        compiled at once (models/fp8_precompile.py)."""
        if self.device.type == "cuda":
            self._precompile_fp8(prompts)
        if self.graphs is not None:
            self.graphs.capture(progress)
        self.sched.decodes_apart = mixed.apart(self)      # split steps run from here on
        if self.prefill_graphs is not None:
            self._capture_mlp_graphs(*self.prefill_graphs)
        if prompts and self.device.type == "cuda":
            warm_up_prompts(self, prefill_progress)
            self.kv_rows = self.kv_bytes_read = 0
            self.exchange_seconds = 0.0
            if self.spec:
                self.spec.counters = type(self.spec.counters)()

    def _capture_mlp_graphs(self, tokens: list[int], reason: str) -> None:
        import gc

        from dcpctl.runtime.models.mlp_graphs import MlpGraphs
        g = None
        try:
            g = MlpGraphs(self.model, tokens)
        except torch.cuda.OutOfMemoryError:
            pass
        if g is None:         # out of the except: its traceback no longer holds the half-built pieces
            gc.collect()
            torch.cuda.empty_cache()
            note_once(f"prefill cuda graphs: off (capturing the MLP at up to {max(tokens)} tokens ran out of GPU "
                      "memory; lower --cuda-graph-max-bs-prefill)")
            return
        self.model.mlp_graphs = g
        note_once(f"{reason}; {len(g.graphs)} pieces ({len(g.buckets)} token counts x {len(self.model.layers)} "
                  f"layers) captured in {g.capture_s:.1f} s, {g.pool_bytes / 2**30:.2f} GiB")

    def _precompile_fp8(self, prompts: bool) -> None:
        # token counts per replica of the forwards the capture and the warm-up run: each graph's batch size, the
        # ladder's prompt lengths, single-token decode steps and the MLP pieces' token counts
        from dcpctl.runtime.models.fp8_precompile import precompile
        tokens = {1, *(self.graphs.sizes if self.graphs is not None else ()), *(ladder(self) if prompts else ()),
                  *(t // self.dp_size for t in (self.prefill_graphs[0] if self.prefill_graphs is not None else ())
                    if t % self.dp_size == 0)}   # a piece holds every replica's tokens; precompile scales by dp
        note = precompile(self.model, tokens, self.dp_size)
        if note:
            note_once(note)

    def _agree(self, chunks: list[SeqChunk]) -> tuple[bool, int | None]:
        """(any replica busy, the graph batch size every replica replays or None for an eager step)."""
        vote = self.graphs.eligible(chunks) if self.graphs is not None else (-1 if chunks else 0)
        if self.dp_size == 1 or self.ps.tp.group is None:  # one replica: no device round trip per step
            return bool(chunks), vote if vote > 0 else None
        every = gather_sizes(vote, self.ps.tp.group, self.ps.tp.size, self.device)
        busy = any(v != 0 for v in every)
        return busy, (max(every) if busy and min(every) >= 0 else None)

    def step(self) -> list[Event]:
        """One batch in lockstep with every rank; this replica's new tokens (and finishes)."""
        chunks = self.sched.next_batch() if self.sched.has_work() else []
        done, self._early = self._early, []
        self.busy, size = self._agree(chunks)
        self.last_step = ("idle", [])
        seqs = self.sched.seqs_of(chunks)     # once a step: the per-row paths below take them
        pipelined = size is not None and self._pipeline and greedy_all(seqs)
        if self._inflight is not None and not pipelined:   # this step needs the real ids on the host first
            done += self._resolve()
            live = {s.rid for s in self.sched.running}
            chunks = [ch for ch in chunks if ch.rid in live]   # EOS just ended some of them
            seqs = [s for s in seqs if s.rid in live]
            if not chunks:
                self.busy = True
                self.last_step = ("resolve", [])
                return done
        if not self.busy:
            return done
        if self.spec and chunks:
            decode, prefill = [], []
            for ch in chunks:
                (prefill if self.sched.seq(ch.rid).prefilling else decode).append(ch)
            if decode:    # propose K, verify K + 1 rows per decoding request; prefill chunks ride the same forward
                self.last_step = ("spec", chunks)
                return done + self.spec.step(self, decode, prefill)
        split = mixed.parts(self, chunks) if size is None else None
        if split is not None:   # decodes replay their graph beside the prompt chunks' eager forward
            self.last_step = (mixed.KIND, chunks)
            return done + mixed.run(self, *split)
        picks = self.sched.samples(chunks, seqs)
        picked = seqs if len(picks) == len(chunks) else [self.sched.seq(rid) for _, rid in picks]   # in chunk order
        self.last_step = ("graph+pipelined" if pipelined else "graph" if size is not None else "eager", chunks)
        if size is not None:    # a captured graph: every chunk is one token, so row i is chunk i
            logits = self.graphs.run(self.input_ids(chunks, seqs), chunks, size, self._sources(chunks, seqs))
            self.kv_bytes_read += kv_rows(self.alloc, chunks, self.ps.dcp.rank) * self.pool.nbytes_per_row()
            rows = [r for r, _ in picks]
            both = self.graphs.greedy(len(chunks))   # [n, 2]: the graph's argmax and logprob per row
            if len(picks) != len(chunks):
                pick = torch.tensor(rows, device=self.device)
                logits, both = logits.index_select(0, pick), both.index_select(0, pick)
            if pipelined:       # queue the sampling copy, then read the previous step while the GPU runs this one
                self.sched.advance(chunks, seqs)
                new = launch_sampling(both, picked, rows)
                done += self._resolve() if self._inflight is not None else []
                self._inflight = new
                return done
        else:
            hidden = self.forward(chunks, self.input_ids(chunks, seqs))
            logits = self.pick_logits(hidden, picks)
        self.sched.advance(chunks, seqs)
        return done + self._accept(logits, picked)

    def pick_logits(self, hidden: Tensor, picks: list[tuple[int, int]], base: int = 0) -> Tensor:
        """Logits [N, V] of the rows `picks` (scheduler.samples) name, offset by `base` rows of hidden [T, D]."""
        rows = to_device(torch.tensor([base + r for r, _ in picks], dtype=torch.int64), self.device)
        return self.model.logits(hidden.index_select(0, rows))

    def _sources(self, chunks: list[SeqChunk], seqs: list[Sequence]) -> list[int] | None:
        """Per chunk (of sequence seqs[i]), the graph row of the in-flight step whose argmax is its input id (-1: its
        id is on the host)."""
        if self._inflight is None:
            return None
        rows = self._inflight.row_of()
        src = []
        for ch, seq in zip(chunks, seqs):
            pending = seq.token(ch.start) == PENDING
            if pending and ch.rid not in rows:
                raise RuntimeError(f"request {ch.rid}: its input token is pending but not in the step in flight")
            src.append(rows[ch.rid] if pending else -1)
        return src

    def _resolve_early(self) -> None:
        """Before the scheduler retracts: a retracted request recomputes from real ids, so read the step in flight."""
        if self._inflight is not None:
            self._early += self._resolve()

    def _resolve(self) -> list[Event]:
        inf, self._inflight = self._inflight, None
        return resolve(inf, self.stop_reason, self._finish)

    def forward(self, chunks: list[SeqChunk], ids: list[int]) -> Tensor:
        """One target forward over allocated `chunks` fed `ids`; counts KV bytes read and exchange time."""
        # ids: T host ints -> hidden [T, D]
        ctx = build_context(self.alloc, self.pool, self.ps.dcp, self.decisions, chunks, self.v_dim)
        hidden = self.model.forward(to_device(host_ints(ids), self.device), ctx.positions, ctx)
        self.kv_bytes_read += ctx.kv_bytes_read
        self.exchange_seconds += ctx.exchange_seconds
        return hidden

    def input_ids(self, chunks: list[SeqChunk], seqs: list[Sequence] | None = None) -> list[int]:
        """The chunks' token ids (seqs: each chunk's sequence, when the caller has them)."""
        ids: list[int] = []
        for ch, seq in zip(chunks, seqs or self.sched.seqs_of(chunks)):
            ids += seq.token_slice(ch.start, ch.start + ch.num_tokens)
        return ids

    def _accept(self, logits: Tensor, seqs: list[Sequence]) -> list[Event]:
        # logits: [N, V] for the N sequences that produce a token this step
        toks, lps = self.sampler(logits, seqs)
        toks = self.broadcast(toks)
        return [self.record(seq, tok, lp) for seq, tok, lp in zip(seqs, toks, lps)]

    def record(self, seq: Sequence, tok: int, lp: float) -> Event:
        """Append one emitted token; at EOS or max_new_tokens the request finishes (pages freed)."""
        seq.output.append(tok)
        seq.logprobs.append(lp)
        seq.finish_reason = self.stop_reason(seq)
        if seq.finish_reason:
            self._finish(seq)
        return Event(seq.rid, tok, lp, seq.finish_reason)

    def stop_reason(self, seq: Sequence, k: int = -1) -> str:
        """"stop" when output token k (default: the last) is EOS, "length" when it is the max_new_tokens-th, else ""."""
        if seq.output[k] in self.eos and not seq.params.ignore_eos:
            return "stop"
        return "length" if (k if k >= 0 else len(seq.output) + k) + 1 >= seq.params.max_new_tokens else ""

    def broadcast(self, toks: list[int]) -> list[int]:
        """Token ids as the replica's first rank has them (ranks must feed equal ids; this guards against drift)."""
        if self.ps.attn_tp.size == 1:
            return toks
        t = torch.tensor(toks, dtype=torch.int64, device=self.device)
        return broadcast(t, self.ps.attn_tp.ranks[0], self.ps.attn_tp.group).tolist()

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
