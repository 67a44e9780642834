"""DeepSeek-V2/V3 (and Kimi K2) decoder in absorbed-MLA form, sharded for TP / EP / attention DP.

    model.forward(input_ids [T], positions [T], ctx: AttentionContext) -> hidden [T, D]
    model.logits(hidden [T, D]) -> [T, vocab] (full vocabulary on every rank)

Under attention DP each replica brings its own T tokens (possibly 0); before every MLP the TP
group gathers all replicas' tokens, runs the MLP on all of them, all-reduces, and each replica
keeps its own slice. Every rank of a TP group must call forward together, even with T = 0.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from dcpctl.runtime.attention.api import AttentionContext
from dcpctl.runtime.models.attention import MlaAttention
from dcpctl.runtime.models.config import MlaConfig
from dcpctl.runtime.kernels.embed_triton import embed_kernel_ok, embed_rows
from dcpctl.runtime.kernels.fusions import Fusions
from dcpctl.runtime.collectives import all_gather_rows, all_reduce, gather_sizes
from dcpctl.runtime.models.ops import add_rms_norm, rms_norm
from dcpctl.runtime.models.rope import Rotary
from dcpctl.runtime.models.shards import Shards
from dcpctl.runtime.kernels.side_stream import SideStream
from dcpctl.runtime.parallel import ParallelState


@dataclass
class Layer:
    input_norm: Tensor
    attn: MlaAttention
    post_norm: Tensor
    mlp: Callable[[Tensor], Tensor]


@dataclass
class Replicas:
    """Token counts of every attention-DP replica in this forward and where ours start."""

    sizes: list[int]
    start: int
    mine: int

    @property
    def total(self) -> int:
        return sum(self.sizes)


class DeepseekModel:
    kda_pool = None  # hybrid models (KimiLinearModel) hold their request-indexed KDA state here
    mlp_graphs = None  # the engine's captured MLP pieces (mlp_graphs.MlpGraphs): eager forwards replay them

    def __init__(self, cfg: MlaConfig, ps: ParallelState, s: Shards, embed: Tensor, lm_head: Tensor,
                 norm: Tensor, layers: list[Layer], rotary: Rotary, fuse: Fusions = Fusions()):
        self.cfg, self.ps, self.shards, self.fuse = cfg, ps, s, fuse
        self.kv_layers = cfg.num_layers  # KV-pool layers (hybrids: only the MLA layers)
        self.embed, self.lm_head, self.norm = embed, lm_head, norm  # vocab rows [vocab_start, vocab_end)
        self.layers, self.rotary = layers, rotary
        self.dtype, self.device = norm.dtype, norm.device

    def release(self, rid: int) -> None:
        """Free per-request model state of `rid` (none here; hybrid models free their KDA slot)."""

    @torch.no_grad()
    def forward(self, input_ids: Tensor, positions: Tensor, ctx: AttentionContext,
                replicas: Replicas | None = None) -> Tensor:
        # input_ids, positions: [T] -> hidden: [T, D] after the final norm
        # replicas: every attention-DP replica's token count when the caller knows it (a CUDA graph's fixed
        # sizes: no gather of the sizes, no host sync); else gathered here
        h = self._embed(input_ids.to(self.device))
        side = SideStream(h, self.fuse.overlap)      # under a graph capture: the angles beside the first GEMM
        with side.fork():
            cos, sin = self.rotary.cos_sin(positions.to(self.device))
        reps = replicas if replicas is not None else self._replicas(h.shape[0])
        eps, up, fused = self.cfg.rms_norm_eps, self.rotary.upcast, self.fuse.add_norm
        # each residual add is fused with the norm that reads its sum (the next layer's input norm, or the
        # final)
        norms = [lay.input_norm for lay in self.layers[1:]] + [self.norm]
        y = rms_norm(h, self.layers[0].input_norm if self.layers else self.norm, eps, up)
        for layer, after in zip(self.layers, norms):
            h, y = add_rms_norm(layer.attn.forward(y, cos, sin, ctx, side), h, layer.post_norm, eps, up,
                                fused)
            h, y = add_rms_norm(self._mlp(layer.mlp, y, reps), h, after, eps, up, fused)
        side.join()                                  # no layers: the angles' fork still ends in the capture
        return y

    @torch.no_grad()
    def logits(self, hidden: Tensor) -> Tensor:
        # hidden: [T, D] -> [T, V]; each attention-TP rank holds a vocab slice, gathered here
        s, at = self.shards, self.ps.attn_tp
        part = torch.nn.functional.linear(hidden, self.lm_head)
        if at.group is None:
            return part
        if hidden.shape[0] == 0:  # the whole attention-TP group agrees on T: skip the collective
            return part.new_zeros(0, self.cfg.vocab_size)
        pad = torch.zeros(hidden.shape[0], s.vocab_padded, dtype=part.dtype, device=part.device)
        pad[:, :part.shape[1]] = part
        return torch.cat(all_gather_rows(pad, at.group, at.size), dim=1)[:, :self.cfg.vocab_size]

    def _embed(self, ids: Tensor) -> Tensor:
        # ids: [T] -> [T, D]; rows outside this rank's vocab slice are zero before the all-reduce
        s = self.shards
        if self.fuse.embed and embed_kernel_ok(ids, self.embed):
            return all_reduce(embed_rows(ids, self.embed, s.vocab_start), self.ps.attn_tp.group)
        local = ids - s.vocab_start
        n = s.vocab_end - s.vocab_start
        mine = ((local >= 0) & (local < n)).unsqueeze(1)
        # a gather of clamped ids, masked: no boolean indexing (its size is data: a host sync), so graphs
        # capture it
        h = torch.where(mine, self.embed[local.clamp(0, n - 1)], 0.0)
        return all_reduce(h, self.ps.attn_tp.group)

    def _replicas(self, n: int) -> Replicas | None:
        ps = self.ps
        if ps.attn_dp_size == 1:
            return None
        every = gather_sizes(n, ps.tp.group, ps.tp.size, self.device)
        sizes = every[::ps.attn_tp.size]  # one entry per replica (attention-TP ranks agree)
        return Replicas(sizes, sum(sizes[:ps.attn_dp_index]), n)

    def _mlp(self, mlp: Callable[[Tensor], Tensor], x: Tensor, reps: Replicas | None) -> Tensor:
        # x: [T, D] -> [T, D] summed over the TP group
        group = self.ps.tp.group
        run = mlp if self.mlp_graphs is None else lambda t: self.mlp_graphs(mlp, t)   # noqa: E731
        if reps is None:
            return all_reduce(run(x), group)
        if reps.total == 0:  # every replica is idle: the TP group skips the collectives together
            return torch.zeros_like(x)
        full = self._gather_replicas(x, reps)
        return all_reduce(run(full), group)[reps.start:reps.start + reps.mine]

    def _gather_replicas(self, x: Tensor, reps: Replicas) -> Tensor:
        # x: [T_mine, D] -> [sum T_i, D] in replica order (padded all-gather over the TP group)
        ps, tmax = self.ps, max(reps.sizes)
        pad = torch.zeros(tmax, x.shape[1], dtype=x.dtype, device=x.device)
        pad[:x.shape[0]] = x
        parts = all_gather_rows(pad, ps.tp.group, ps.tp.size)
        return torch.cat([parts[i * ps.attn_tp.size][:n] for i, n in enumerate(reps.sizes)], dim=0)
