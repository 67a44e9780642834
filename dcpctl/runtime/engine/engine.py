"""Continuous batching over one attention-DP replica, in lockstep with the whole TP group: each step schedules
a batch, the model runner runs it, the engine accepts its tokens.

Incremental API (what the server drives): submit(rid, prompt, params) and cancel(rid) between
steps, step() -> this replica's events.  generate() is built on the same three calls.

Each step reads as schedule, run, accept:

  1. schedule: the scheduler picks one decode token per running request plus prefill chunks (or retracts
     requests when the pool runs out; engine/scheduler.py); the replicas agree on a graph size; the engine
     makes the step's `Batch` (engine/batch.py: the chunks and the mode that runs them: eager, graph,
     pipelined, split, spec);
  2. run: the model runner runs it (engine/model_runner.py): one forward, a decode graph replay, a mixed
     step's split or a speculative step's forwards;
  3. accept: the chunks advance, the sequences whose chunk reached their end get a token (sampled here, or
     read one step later when the step was pipelined: engine/pipeline.py), and finished requests free their
     pages.

Request `rid` goes to replica `rid % attn_dp_size`; a replica with nothing to do still runs forward with T = 0
while any replica has work (`busy` says whether the last step ran).
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import Tensor

from dcpctl.contract.launch_config import LaunchConfig
from dcpctl.runtime.attention.dcp import SeqChunk
from dcpctl.runtime.boot import DTYPES
from dcpctl.runtime.collectives import gather_sizes
from dcpctl.runtime.engine.batch import IDLE, RESOLVE, Batch, make_batch
from dcpctl.runtime.engine.events import Event, ReplicaStats
from dcpctl.runtime.engine.hicache import HiCache
from dcpctl.runtime.engine.model import ServedModel, latent_dims, state_pool
from dcpctl.runtime.engine.model_runner import ModelRunner, StepOut
from dcpctl.runtime.engine.pipeline import Pipeline
from dcpctl.runtime.engine.request import SamplingParams, Sequence
from dcpctl.runtime.engine.sample import Sampler, greedy_all
from dcpctl.runtime.engine.scheduler import Scheduler, SchedulerError
from dcpctl.runtime.engine.spec import make_speculative, summarize
from dcpctl.runtime.engine.warm_up import Room, ladder, warm_up_prompts
from dcpctl.runtime.graph_capture import Progress
from dcpctl.runtime.kv.allocator import VirtualAllocator, local_len, owned_rows
from dcpctl.runtime.kv.pool import KVPool
from dcpctl.runtime.notes import note_once
from dcpctl.runtime.parallel import ParallelState

RankPart = tuple[dict[int, dict], int, int, Any]   # (results, kv_rows, kv_bytes_read, spec counters)


class Engine:
    """Runs generate() on every rank of the world; see module docstring."""

    def __init__(self, model: ServedModel, ps: ParallelState, cfg: LaunchConfig) -> None:
        kv = cfg.kv
        self.model, self.ps = model, ps
        self.dp_size = cfg.topology.attn_dp_size
        self.device = torch.device(cfg.device)
        self.eos = set(cfg.eos_token_ids)
        layers, self.v_dim, row = latent_dims(model)
        self.alloc = VirtualAllocator(kv.capacity_tokens, kv.page_size, ps.dcp.size)
        sizes = list(cfg.cuda_graph.batch_sizes) if cfg.cuda_graph is not None else []
        self.trash_slot = self.alloc.num_pages * kv.page_size   # a spare page for the graphs' pad rows
        self.pool = KVPool(layers, (self.alloc.num_pages + int(bool(sizes))) * kv.page_size, row,
                           DTYPES[cfg.model.dtype], self.device)
        self.state_pool = state_pool(model, kv.max_running_requests)  # hybrids: request-indexed KDA state
        self.sched = Scheduler(self.alloc, kv.chunked_prefill_size, kv.max_running_requests, self.state_pool,
                               cfg.schedule)
        note_once(self.sched.schedule.reason)
        self.hicache = HiCache.from_section(cfg.hicache, self.alloc, self.pool, kv.page_size, ps.dcp,
                                           self.state_pool)
        self.sched.cache = self.hicache           # None unless the launch config has `hicache`
        self.finish_hooks: list[Any] = []         # f(seq) before a finished request's pages are freed (PD)
        self.sampler = Sampler(self.eos, str(cfg.model.path))   # the model's tokenizer: grammars (engine/rules.py)
        # None without a `speculative` section
        self.spec = make_speculative(cfg.speculative, model, capacity=self.alloc.virtual_capacity,
                                     page_size=kv.page_size, dtype=self.pool.kv.dtype, device=self.device,
                                     lead=ps.attn_tp.rank == 0, hybrid=self.state_pool is not None)
        if self.spec:
            self.sched.on_retract.append(lambda seq: self.spec.release(seq, count=False))  # rebuilt on return
        self.runner = ModelRunner(model, ps, cfg, self.alloc, self.pool, self.v_dim, self.trash_slot,
                                  self.spec, self.state_pool)
        self.pipe = Pipeline(self.stop_reason, self._finish)   # the pipelined step in flight
        self._early: list[Event] = []             # events of a step in flight read before a retraction
        self.sched.before_retract = self._resolve_early
        self.busy = False                        # whether any replica ran the last step
        self.last_step: tuple[str, list[SeqChunk]] = (IDLE, [])  # (mode, chunks): the step trace (loop.py)
        self.kv_rows = 0                         # rows held by finished requests
        self._results: dict[int, dict] | None = None  # generate() only: rid -> result

    @property
    def kv_bytes_read(self) -> int:
        """Bytes of KV this rank's forwards attended (since warm_up)."""
        return self.runner.kv_bytes_read

    @property
    def exchange_seconds(self) -> float:
        """Seconds this rank spent in DCP collectives (since warm_up; for /metrics)."""
        return self.runner.exchange_seconds

    def owns(self, rid: int) -> bool:
        return rid % self.dp_size == self.ps.attn_dp_index

    def submit(self, rid: int, prompt: list[int], params: SamplingParams) -> None:
        """Queue a request (only on its replica); raises SchedulerError for an impossible one."""
        if self.owns(rid):
            if self.spec and params.has_rules:   # a verified draft never passes the host-side logit rules
                raise SchedulerError(f"request {rid}: logit rules and grammars are not run with speculative decoding")
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
        self.pipe.drop()      # its tokens are dropped with their requests
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
        """Step until no replica has work; returns the steps that ran a batch (the batch runner of plain and
        PD)."""
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
        """Every rank: requests 0..n-1's results (each given by one rank) and every rank's counters, in rank
        order."""
        spec = self.spec.counters if self.spec else None
        mine: RankPart = (results, self.kv_rows, self.kv_bytes_read, spec)
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
        """[layers, n, R]: this rank's KV rows of seq's prompt positions it owns, in position order (PD
        prefill)."""
        c, r = self.ps.dcp.size, self.ps.dcp.rank
        slots = self.alloc.slots(seq.rid)
        phys = torch.tensor(owned_rows(slots, 0, len(seq.prompt), r, c), dtype=torch.int64,
                            device=self.pool.kv.device)
        return self.pool.kv.index_select(1, phys)

    def warm_up(self, progress: Progress | None = None, prompts: bool = False,
                prefill_progress: Progress | None = None) -> None:
        """Before serving: capture the decode graphs and the MLP pieces (engine/model_runner.py) and
        (prompts=True, on CUDA) run one short request per replica for each prompt length of `warm_up_lengths`
        (each its own first token: no prefix is reused), then every GEMM those prefills used over gemm_warm's
        grid of token counts.  Every rank calls it together; counters are reset after.  On CUDA, first, the
        block-FP8 kernels all of that launches are compiled at once (models/fp8_precompile.py)."""
        warm = prompts and self.device.type == "cuda"
        room = Room.of(self.sched.chunk_size, self.sched.split, self.alloc.virtual_capacity, self.dp_size)
        self.runner.capture(progress, ladder(room) if prompts else [])
        split = self.runner.mixed
        self.sched.decodes_apart = 0 if split.off else split.apart      # split steps run from here on
        if warm:
            warm_up_prompts(self.generate, room, prefill_progress)
            self.kv_rows = self.runner.kv_bytes_read = 0
            self.runner.exchange_seconds = 0.0
            if self.spec:
                self.spec.counters = type(self.spec.counters)()

    def _agree(self, chunks: list[SeqChunk]) -> tuple[bool, int | None]:
        """(any replica busy, the graph batch size every replica replays or None for an eager step)."""
        vote = self.runner.vote(chunks)
        if self.dp_size == 1 or self.ps.tp.group is None:  # one replica: no device round trip per step
            return bool(chunks), vote if vote > 0 else None
        every = gather_sizes(vote, self.ps.tp.group, self.ps.tp.size, self.device)
        busy = any(v != 0 for v in every)
        return busy, (max(every) if busy and min(every) >= 0 else None)

    def step(self) -> list[Event]:
        """Schedule, run and accept one batch in lockstep with every rank: this replica's new tokens (and
        finishes)."""
        batch, done = self._schedule()
        self.last_step = (batch.mode, batch.chunks)
        if not batch.runs:
            return done
        return done + self._accept(batch, self.runner.run(batch))

    def _schedule(self) -> tuple[Batch, list[Event]]:
        """This step's batch (engine/batch.py), and the events read before it: a retraction's, and the step in
        flight's when this one needs the real ids on the host (it is not pipelined)."""
        chunks = self.sched.next_batch() if self.sched.has_work() else []
        done, self._early = self._early, []
        self.busy, size = self._agree(chunks)
        seqs = self.sched.seqs_of(chunks)     # once a step: the per-row paths take them
        pipelined = size is not None and self.runner.pipelines and greedy_all(seqs)
        if self.pipe.step is not None and not pipelined:
            done += self.pipe.read(self.runner.clock)
            live = {s.rid for s in self.sched.running}
            kept = [i for i, ch in enumerate(chunks) if ch.rid in live]    # EOS just ended some of them
            chunks, seqs = [chunks[i] for i in kept], [seqs[i] for i in kept]
            if not chunks:
                self.busy = True
                return Batch(RESOLVE), done
        if not self.busy:
            return Batch(IDLE), done
        src = self.pipe.sources(chunks, seqs) if size is not None else None
        return make_batch(chunks, seqs, size, src, pipelined, self.spec is not None, self.runner.mixed), done

    def _accept(self, batch: Batch, out: StepOut) -> list[Event]:
        """The run's tokens: chunks advanced, tokens sampled (or a verification accepted, or the pipelined
        step's argmax rows kept for the next step while the one before is read); finished requests freed."""
        self.sched.advance(*batch.advancing())
        events = self._sample(out.logits, batch.sampled) if out.logits is not None else []
        if out.verify is not None:
            events += self.spec.accept(out.verify, self.sampler, self.runner.broadcast, self.record)
        if out.device is not None:    # queue the sampling copy, then read the step before while the GPU runs
            events += self.pipe.push(out.device, batch.sampled, batch.rows, self.runner.clock)
        return events

    def _resolve_early(self) -> None:
        """Before the scheduler retracts: a retracted request recomputes from real ids, so read the step in
        flight."""
        self._early += self.pipe.read(self.runner.clock)

    def _sample(self, logits: Tensor, seqs: list[Sequence]) -> list[Event]:
        # logits: [N, V] for the N sequences that produce a token this step
        toks, lps = self.sampler(logits, seqs)
        toks = self.runner.broadcast(toks)
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
        """"stop" when output token k (default: the last) is EOS or one of the request's stop_token_ids, "length" when
        it is the max_new_tokens-th, else ""."""
        tok = seq.output[k]
        if (tok in self.eos and not seq.params.ignore_eos) or tok in seq.params.stop_token_ids:
            return "stop"
        return "length" if (k if k >= 0 else len(seq.output) + k) + 1 >= seq.params.max_new_tokens else ""

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
