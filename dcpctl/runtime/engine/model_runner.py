"""One model runner: it runs the batch the engine scheduled and captures the graphs it replays.  Engine.step
reads as schedule, run, accept; this is the run.

    runner.capture(progress, prompt_lengths)   # before ready: the decode graphs and each layer's MLP pieces
    out = runner.run(batch)                    # engine/batch.py's Batch -> StepOut, for the engine to accept

The batch's mode picks one method from one table: an eager forward, a decode graph replay (`graph`), the same
with the inputs of the step in flight read on the device (`graph+pipelined`: engine/pipeline.py), a mixed
step's split (`graph+prefill`: engine/mixed.py) or a speculative step's forwards (`spec`: engine/spec.py).  It
is the engine's one caller of the model, the decode graphs (engine/decode_graphs.py, whose `_AttentionSeam`
holds every call into the attention backends' graph hooks) and the MLP pieces, and it counts the KV bytes they
read and the time spent in DCP collectives.  `clock` (engine/phases.py, None unless the step trace asks) times
the graph steps' host phases.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import torch
from torch import Tensor

from dcpctl.contract.launch_config import LaunchConfig
from dcpctl.runtime.attention.dcp import SeqChunk, build_context, kv_rows
from dcpctl.runtime.attention.layout import host_ints, to_device
from dcpctl.runtime.collectives import broadcast
from dcpctl.runtime.engine import mixed
from dcpctl.runtime.engine.batch import EAGER, GRAPH, PIPELINED, SPEC, SPLIT, Batch, token_ids
from dcpctl.runtime.engine.decode_graphs import DecodeGraphs
from dcpctl.runtime.engine.graph_plan import capture_decode, capture_mlp, prefill_graphs_plan, why_not
from dcpctl.runtime.engine.model import ServedModel, StatePool
from dcpctl.runtime.engine.phases import StepClock
from dcpctl.runtime.engine.spec import SpecDecoder, Verification
from dcpctl.runtime.graph_capture import Progress
from dcpctl.runtime.kv.allocator import VirtualAllocator
from dcpctl.runtime.kv.pool import KVPool
from dcpctl.runtime.notes import note_once
from dcpctl.runtime.parallel import ParallelState


@dataclass
class StepOut:
    """What one run hands the engine to accept (engine/batch.py: `rows` and `sampled`)."""

    logits: Tensor | None = None          # [N, V] for batch.sampled, sampled on the host (None: none)
    device: Tensor | None = None          # graph+pipelined: [N, 2] argmax (as a float) and its logprob per
                                          # sampled row, on the device (a view: read before the next replay)
    verify: Verification | None = None    # spec: the drafts and the target's logits over them


class ModelRunner:
    """Runs one scheduled batch on this rank (module docstring)."""

    def __init__(self, model: ServedModel, ps: ParallelState, cfg: LaunchConfig, alloc: VirtualAllocator,
                 pool: KVPool, v_dim: int, trash_slot: int, spec: SpecDecoder | None,
                 state_pool: StatePool | None) -> None:
        self.model, self.ps, self.alloc, self.pool, self.spec = model, ps, alloc, pool, spec
        self.decisions, self.v_dim, self.trash_slot = cfg.decisions, v_dim, trash_slot
        self.device, self.dp = torch.device(cfg.device), cfg.topology.attn_dp_size
        sizes = list(cfg.cuda_graph.batch_sizes) if cfg.cuda_graph is not None else []
        off = why_not(model, spec, sizes, state_pool)
        if off:
            note_once(off)
        self.sizes = sorted(sizes) if sizes and not off else []     # decode graph batch sizes to capture
        self.graph_reason = cfg.cuda_graph.reason if self.sizes else ""
        self.prefill = prefill_graphs_plan(model, cfg.cuda_graph, self.device)   # (tokens, reason) or None
        self.pipelines = bool(self.sizes) and self.dp == 1       # engine/pipeline.py
        self.split_off = mixed.split_off(bool(self.sizes), self.dp)
        self.mixed = mixed.Split(self.split_off, 0)  # when a mixed step splits (capture sets the decodes)
        self.graphs: DecodeGraphs | None = None     # captured by capture()
        self.clock: StepClock | None = None         # the step trace's timing hooks (engine/phases.py)
        self.kv_bytes_read = 0                      # bytes of KV the forwards attended
        self.exchange_seconds = 0.0                 # time in DCP collectives (for /metrics)
        self._modes: dict[str, Callable[[Batch], StepOut]] = {EAGER: self._eager, GRAPH: self._graph,
                                                              PIPELINED: self._pipelined, SPLIT: self._split,
                                                              SPEC: self._spec}

    # ---- before ready ------------------------------------------------------------------------------

    def capture(self, progress: Progress | None = None, prompt_lengths: Iterable[int] = ()) -> None:
        """Capture the decode graphs and each layer's MLP pieces (what the launch config asks and this engine
        can); on CUDA first compile the block-FP8 kernels they and the warm-up's prompts of `prompt_lengths`
        launch."""
        if self.device.type == "cuda":
            self._precompile_fp8(prompt_lengths)
        if self.sizes:
            self.graphs = capture_decode(self.model, self.alloc, self.pool, self.decisions, self.v_dim,
                                         self.sizes, self.graph_reason, self.trash_slot, progress)
            self.mixed = mixed.Split(self.split_off, self.sizes[-1])
        if self.prefill is not None:
            self.model.mlp_graphs = capture_mlp(self.model, *self.prefill)

    def _precompile_fp8(self, prompt_lengths: Iterable[int]) -> None:
        # token counts per replica of the forwards the capture and the warm-up run: each graph's batch size,
        # the ladder's prompt lengths, single-token decode steps and the MLP pieces' token counts
        from dcpctl.runtime.models.fp8_precompile import precompile
        pieces = self.prefill[0] if self.prefill is not None else ()
        # a piece holds every replica's tokens
        tokens = {1, *self.sizes, *prompt_lengths, *(t // self.dp for t in pieces if t % self.dp == 0)}
        note = precompile(self.model, tokens, self.dp)
        if note:
            note_once(note)

    def vote(self, chunks: list[SeqChunk]) -> int:
        """This replica's graph vote for a step of `chunks`: its batch size when it can replay (0 when idle),
        else -1 (an eager step)."""
        if self.graphs is None:
            return -1 if chunks else 0
        if any(ch.num_tokens != 1 for ch in chunks):
            return -1
        top = self.graphs.sizes[-1]
        if len(chunks) > top:
            note_once(f"cuda graphs: decode batches above the largest captured size ({top}) run "
                      "eagerly (raise --cuda-graph-max-bs-decode)")
            return -1
        return len(chunks)

    # ---- one step ----------------------------------------------------------------------------------

    def run(self, batch: Batch) -> StepOut:
        """Run one scheduled batch (its mode picks how: module docstring)."""
        return self._modes[batch.mode](batch)

    def _eager(self, b: Batch) -> StepOut:
        hidden = self.forward(b.chunks, token_ids(b.chunks, b.seqs))
        return StepOut(logits=self.logits(hidden, b.rows))

    def _graph(self, b: Batch) -> StepOut:
        return StepOut(logits=self._picked(self._replay(b.chunks, b.seqs, b.size, b.src), b))

    def _pipelined(self, b: Batch) -> StepOut:
        self._replay(b.chunks, b.seqs, b.size, b.src)
        return StepOut(device=self._picked(self.graphs.sampled[:len(b.chunks)], b))

    def _split(self, b: Batch) -> StepOut:
        # the decodes replay their graph first (queued while the host builds the prompt chunks' forward)
        logits = self._replay(b.decode, b.decode_seqs, None, None)   # [n, V]: every decode row gives a token
        hidden = self.forward(b.prefill, token_ids(b.prefill, b.prefill_seqs))
        if b.rows:                           # the graph's rows are a view of its output: cat copies them out
            logits = torch.cat([logits, self.logits(hidden, b.rows)])
        return StepOut(logits=logits)

    def _spec(self, b: Batch) -> StepOut:
        # propose K per decoding request, then ONE target forward of K + 1 rows each; the prompt chunks ride
        # along
        seqs, k = b.decode_seqs, self.spec.k
        flat = self.broadcast([t for d in self.spec.propose(seqs) for t in d])   # ranks must feed equal ids
        drafts = [flat[i * k:(i + 1) * k] for i in range(len(seqs))]
        chunks, ids = self.spec.verify_input(seqs, drafts)
        hidden = self.forward(chunks + b.prefill, ids + token_ids(b.prefill, b.prefill_seqs))
        n = len(seqs) * (k + 1)
        verify = Verification(seqs, drafts, self.model.logits(hidden[:n]))   # [B * (K + 1), V]
        return StepOut(logits=self.logits(hidden, b.rows, n) if b.rows else None, verify=verify)

    def _replay(self, chunks: list[SeqChunk], seqs: list, size: int | None, src: list[int] | None) -> Tensor:
        # one decode graph step: logits [n, V] (a view into the graph's output)
        out = self.graphs.replay(token_ids(chunks, seqs), chunks, size, src, self.clock)
        self.kv_bytes_read += kv_rows(self.alloc, chunks, self.ps.dcp.rank) * self.pool.nbytes_per_row()
        return out

    def _picked(self, rows_out: Tensor, b: Batch) -> Tensor:
        # a graph's per-chunk rows [n, ...] -> the sampled ones (every chunk is one token: row i is chunk i)
        if len(b.rows) == len(b.chunks):
            return rows_out
        return rows_out.index_select(0, torch.tensor(b.rows, device=self.device))

    def forward(self, chunks: list[SeqChunk], ids: list[int]) -> Tensor:
        """One target forward over allocated `chunks` fed `ids`; counts KV bytes read and exchange time."""
        # ids: T host ints -> hidden [T, D]
        ctx = build_context(self.alloc, self.pool, self.ps.dcp, self.decisions, chunks, self.v_dim)
        hidden = self.model.forward(to_device(host_ints(ids), self.device), ctx.positions, ctx)
        self.kv_bytes_read += ctx.kv_bytes_read
        self.exchange_seconds += ctx.exchange_seconds
        return hidden

    def logits(self, hidden: Tensor, rows: list[int], base: int = 0) -> Tensor:
        """Logits [N, V] of `rows` (offset by `base`) of hidden [T, D]."""
        idx = to_device(torch.tensor([base + r for r in rows], dtype=torch.int64), self.device)
        return self.model.logits(hidden.index_select(0, idx))

    def broadcast(self, toks: list[int]) -> list[int]:
        """Token ids as the replica's first rank has them (its ranks must feed equal ids: a guard against
        drift)."""
        if self.ps.attn_tp.size == 1:
            return toks
        t = torch.tensor(toks, dtype=torch.int64, device=self.device)
        return broadcast(t, self.ps.attn_tp.ranks[0], self.ps.attn_tp.group).tolist()
