"""MLA attention of one layer, heads split over attention TP, in the absorbed or the MHA form.

    absorbed: q_nope @ w_kc -> latent query;  [q_lat, rope(q_pe)] . [norm(c_kv), rope(k_pe)]  (R-dim dot)
              o_lat @ w_vc -> per-head value;  o_proj (row-parallel) -> all-reduce over attention TP
    MHA:      [q_nope, rope(q_pe)] . [c_kv @ W_k[h]^T, rope(k_pe)]  (qk-dim dot), p @ (c_kv @ W_v[h]^T)
              -> o_proj (the context up-projects its cached latent rows with w_kv, the DCP group's kv_b_proj,
              block by block; it picks the form per chunk: attention/form.py)
    mixed:    a batch whose chunks differ (prefill chunks beside decodes) runs each form over its sub-batch,
              each through its own context, and the per-head values go back in batch order before one o_proj

kv_b_proj rows per head are [nope rows of W_k | v rows of W_v], each [*, kv_lora_rank]; so
w_kc[h] = W_k[h] ([nope, L]) and w_vc[h] = W_v[h]^T ([L, v]).

With the fusions on (fusions.py): q_a and kv_a are one GEMM; the absorbed query is one [T, Hq, R] buffer whose
latent slice the bmm writes and whose rope slice the rope kernel writes; the new latent rows go from kv_a's
output straight into the KV pool (norm + rope + write: one kernel) when the context says where
(`kv_destination`); the value bmm writes the o_proj input head-major, with no reshape copy.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from dcpctl.runtime.attention.api import AttentionContext
from dcpctl.runtime.models.checkpoint import Want
from dcpctl.runtime.models.config import MlaConfig
from dcpctl.runtime.kernels.fusions import Fusions
from dcpctl.runtime.kernels.gemm_warm import bmm_into
from dcpctl.runtime.kernels.norm_triton import fused_norm_ok
from dcpctl.runtime.collectives import all_reduce
from dcpctl.runtime.models.ops import rms_norm
from dcpctl.runtime.models.quant import Weight, concat_rows, linear, rows
from dcpctl.runtime.models.rope import Rotary
from dcpctl.runtime.kernels.rope_triton import kv_rows_into, rope_kernel_ok, rope_q_into
from dcpctl.runtime.models.shards import Shards
from dcpctl.runtime.kernels.side_stream import SideStream

LATENT_NORM_EPS = 1e-6  # q_a_layernorm / kv_a_layernorm use the default eps in HF and DeepSeek


def attention_wants(cfg: MlaConfig, p: str, s: Shards) -> list[Want]:
    """Tensors of one attention layer under prefix p (e.g. 'model.layers.3.self_attn.')."""
    D, H, qk, L = cfg.hidden_size, cfg.num_heads, cfg.qk_head_dim, cfg.kv_lora_rank
    kvh = cfg.qk_nope_head_dim + cfg.v_head_dim
    q_rows = (s.q_head_start * qk, (s.q_head_start + s.q_heads) * qk)
    wants = [
        Want(p + "kv_a_proj_with_mqa.weight", (L + cfg.qk_rope_head_dim, D), fp8_ok=True),
        Want(p + "kv_a_layernorm.weight", (L,)),
        # kv_b_proj: w_kc / w_vc for the absorbed form, the DCP group's heads for the MHA form; always
        # dequantized
        Want(p + "kv_b_proj.weight", (H * kvh, L), 0, s.group_head_start * kvh,
             (s.group_head_start + s.group_heads) * kvh),
        Want(p + "o_proj.weight", (D, H * cfg.v_head_dim), 1, s.head_start * cfg.v_head_dim,
             (s.head_start + s.heads) * cfg.v_head_dim, fp8_ok=True),
    ]
    if cfg.q_lora_rank is None:
        return wants + [Want(p + "q_proj.weight", (H * qk, D), 0, *q_rows, fp8_ok=True)]
    Q = cfg.q_lora_rank
    return wants + [Want(p + "q_a_proj.weight", (Q, D), fp8_ok=True), Want(p + "q_a_layernorm.weight", (Q,)),
                    Want(p + "q_b_proj.weight", (H * qk, Q), 0, *q_rows, fp8_ok=True)]


class MlaAttention:
    def __init__(self, cfg: MlaConfig, layer: int, p: str, t: dict[str, Tensor], s: Shards,
                 rotary: Rotary, scale: float, group: Any, fuse: Fusions = Fusions()):
        self.cfg, self.layer, self.rotary, self.scale, self.group = cfg, layer, rotary, scale, group
        self.upcast, self.fuse = rotary.upcast, fuse
        self.q_is_group, self.heads, self.q_heads = s.q_is_group, s.heads, s.q_heads
        q_a, kv_a = t.get(p + "q_a_proj.weight"), t[p + "kv_a_proj_with_mqa.weight"]
        # q_a then kv_a as one weight (they share the input): block-FP8 q_a ends on a scale block (1536 = 12 x
        # 128)
        self.qkv_a = concat_rows(q_a, kv_a) if fuse.qkv_a and q_a is not None else None
        self.pair = (q_a, kv_a) if self.qkv_a is None else None
        if self.qkv_a is not None:
            t.pop(p + "q_a_proj.weight")
            t.pop(p + "kv_a_proj_with_mqa.weight")
        self.q_a_norm = t.get(p + "q_a_layernorm.weight")
        self.q_b = t[p + "q_b_proj.weight"] if cfg.q_lora_rank is not None else t[p + "q_proj.weight"]
        self.kv_a_norm = t[p + "kv_a_layernorm.weight"]
        nope, L = cfg.qk_nope_head_dim, cfg.kv_lora_rank
        # [Hl*dcp, nope+v, L]
        self.w_kv = t[p + "kv_b_proj.weight"].view(s.group_heads, nope + cfg.v_head_dim, L)
        q0, off = s.q_head_start - s.group_head_start, s.head_start - s.group_head_start
        self.w_kc = self.w_kv[q0:q0 + s.q_heads, :nope, :].contiguous()  # [Hq, nope, L]
        self.w_vc = self.w_kv[off:off + s.heads, nope:, :].transpose(1, 2).contiguous()  # [Hl, L, v]
        self.o_proj = t[p + "o_proj.weight"]  # [D, Hl * v]

    @property
    def q_a(self) -> Weight | None:
        return self.pair[0] if self.qkv_a is None else rows(self.qkv_a, 0, self.cfg.q_lora_rank)

    @property
    def kv_a(self) -> Weight:
        return self.pair[1] if self.qkv_a is None else rows(self.qkv_a, self.cfg.q_lora_rank,
                                                            self.qkv_a.shape[0])

    def _a_projections(self, x: Tensor) -> tuple[Tensor | None, Tensor]:
        # x: [T, D] -> q_a's output [T, Q] (None without q_lora), kv_a's output [T, L + rope] (c_kv not
        # normalized)
        if self.qkv_a is not None:
            qa, kv = linear(x, self.qkv_a).split([self.cfg.q_lora_rank, self.cfg.latent_dim], dim=-1)
            return qa, kv
        q_a, kv_a = self.pair
        return (linear(x, q_a) if q_a is not None else None), linear(x, kv_a)

    def _q_b(self, x: Tensor, qa: Tensor | None) -> Tensor:
        # x: [T, D], qa: [T, Q] or None -> q: [T, Hq, qk_head_dim]
        xq = rms_norm(qa, self.q_a_norm, LATENT_NORM_EPS, self.upcast) if qa is not None else x
        return linear(xq, self.q_b).view(x.shape[0], self.q_heads, self.cfg.qk_head_dim)

    def _rope_into(self, x: Tensor, cos: Tensor, sin: Tensor, out: Tensor) -> None:
        # x: [T, H, rope] -> out (a view of the query buffer; may be x itself: the kernel's program loads its
        # rows' pairs before it stores them, and the torch path builds the result before the copy)
        r = self.rotary
        if isinstance(r, Rotary) and rope_kernel_ok(x, cos, self.upcast) and out.stride(-1) == 1:
            rope_q_into(x, cos, sin, out, r.interleaved, r.math_upcast)
        else:
            out.copy_(r.apply(x, cos, sin))

    def _query(self, q: Tensor, cos: Tensor, sin: Tensor, side: SideStream) -> Tensor:
        # q: [T, Hq, qk_head_dim] -> [T, Hq, R]: [q_nope @ w_kc, rope(q_pe)]; `side` is joined when it returns
        cfg = self.cfg
        q_nope, q_pe = q.split([cfg.qk_nope_head_dim, cfg.qk_rope_head_dim], dim=-1)
        if not self.fuse.q_rope:
            q_lat = torch.einsum("thn,hnl->thl", q_nope, self.w_kc)
            side.join()
            return torch.cat([q_lat, self.rotary.apply(q_pe, cos, sin)], dim=-1)
        L = cfg.kv_lora_rank
        out = torch.empty(q.shape[0], self.q_heads, cfg.latent_dim, dtype=q.dtype, device=q.device)
        with side.fork():                # the rope slice beside the w_kc bmm (after the angles and the KV
                                         # write)
            self._rope_into(q_pe, cos, sin, out[:, :, L:])
        bmm_into(q_nope.transpose(0, 1), self.w_kc, out[:, :, :L].transpose(0, 1), self.fuse.head_bmm)
        side.join()
        return out

    def _kv_written(self, kv: Tensor, cos: Tensor, sin: Tensor, ctx: AttentionContext) -> bool:
        # kv: [T, L + rope]; True when the fused kernel wrote the batch's latent rows into the pool itself
        where = getattr(ctx, "kv_destination", None)
        if not self.fuse.kv_write or where is None or not isinstance(self.rotary, Rotary):
            return False
        dst, rows_, slots = where(self.layer)
        L = self.cfg.kv_lora_rank
        if (dst.dtype != kv.dtype or not rope_kernel_ok(kv, cos, self.upcast)
                or not fused_norm_ok(kv[:, :L], self.kv_a_norm, self.upcast)):
            return False
        kv_rows_into(kv, self.kv_a_norm, LATENT_NORM_EPS, cos, sin, dst, rows_, slots,
                     self.rotary.interleaved, self.rotary.math_upcast)
        return True

    def _latent_rows(self, kv: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        # kv: [T, L + rope] -> [T, R]: [norm(c_kv), rope(k_pe)]
        c_kv, k_pe = kv.split([self.cfg.kv_lora_rank, self.cfg.qk_rope_head_dim], dim=-1)
        c_kv = rms_norm(c_kv, self.kv_a_norm, LATENT_NORM_EPS, self.upcast)
        return torch.cat([c_kv, self.rotary.apply(k_pe, cos, sin)], dim=-1)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, ctx: AttentionContext,
                side: SideStream | None = None) -> Tensor:
        # x: [T, D] -> [T, D] summed over attention TP
        # side: the step's side stream (cos/sin may still be in flight on it); while a graph is captured the
        # fused KV write runs there beside the q_b GEMM, and the q rope beside the w_kc bmm (side_stream.py)
        side = side or SideStream(x, False)
        qa, kv = self._a_projections(x)
        parts = self._split(ctx)
        if parts is not None:
            v = self._values_split(parts, x, qa, kv, cos, sin, side)
        elif self._mha(ctx):
            v = self._values_mha(x, qa, kv, cos, sin, ctx, side)
        else:
            v = self._values_absorbed(x, qa, kv, cos, sin, ctx, side)
        return all_reduce(linear(v, self.o_proj), self.group)

    def _values_absorbed(self, x: Tensor, qa: Tensor | None, kv: Tensor, cos: Tensor, sin: Tensor,
                         ctx: AttentionContext, side: SideStream) -> Tensor:
        # x: [T, D] -> the o_proj input [T, Hl * v] in the absorbed form
        with side.fork():
            written = self._kv_written(kv, cos, sin, ctx)
        q = self._query(self._q_b(x, qa), cos, sin, side)
        kv_new = None if written else self._latent_rows(kv, cos, sin)
        o = ctx.attend(self.layer, q, kv_new, self.scale, q_is_group=self.q_is_group)  # [T, Hl, L]
        T, vd = x.shape[0], self.cfg.v_head_dim
        if self.fuse.v_out:
            v = torch.empty(T, self.heads, vd, dtype=o.dtype, device=o.device)
            bmm_into(o.transpose(0, 1), self.w_vc, v.transpose(0, 1), self.fuse.head_bmm)
            return v.view(T, self.heads * vd)
        return torch.einsum("thl,hlv->thv", o, self.w_vc).reshape(T, self.heads * vd)

    def _values_split(self, parts: list, x: Tensor, qa: Tensor | None, kv: Tensor, cos: Tensor, sin: Tensor,
                      side: SideStream) -> Tensor:
        # x: [T, D] -> [T, Hl * v]: each part (batch rows, its context, MHA?) through its form, back in batch
        # order
        v = None
        for part_rows, sub, mha in parts:
            pick = lambda t: None if t is None else t.index_select(0, part_rows)   # noqa: E731
            run = self._values_mha if mha else self._values_absorbed
            out = run(pick(x), pick(qa), pick(kv), pick(cos), pick(sin), sub, side)
            v = out.new_zeros(x.shape[0], out.shape[1]) if v is None else v   # pad rows (in no part) stay 0
            v.index_copy_(0, part_rows, out)
        return v

    def _split(self, ctx: AttentionContext) -> list | None:
        split = getattr(ctx, "split", None)      # a mixed batch's sub-batches (DCPContext), else None
        return split(self.cfg) if split else None

    def _mha(self, ctx: AttentionContext) -> bool:
        use = getattr(ctx, "use_mha", None)      # contexts without the MHA form (decode graphs, test
                                                 # references)
        return bool(use and use(self.cfg))

    def _values_mha(self, x: Tensor, qa: Tensor | None, kv: Tensor, cos: Tensor, sin: Tensor,
                    ctx: AttentionContext, side: SideStream) -> Tensor:
        # x: [T, D] -> [T, Hl * v] in the MHA form; the latent rows go to the pool exactly as in the absorbed
        # form
        written = self._kv_written(kv, cos, sin, ctx)
        q = self._q_b(x, qa)                                            # [T, Hq, nope + rope]
        q_pe = q[..., self.cfg.qk_nope_head_dim:]
        if self.fuse.q_rope:      # in place (q is this call's own): the kernel reads each row before it
                                  # writes it
            self._rope_into(q_pe, cos, sin, q_pe)
        else:
            q_pe.copy_(self.rotary.apply(q_pe, cos, sin))
        kv_new = None if written else self._latent_rows(kv, cos, sin)
        # [T, Hl, v]
        o = ctx.attend_mha(self.layer, q, kv_new, self.scale, self.w_kv, q_is_group=self.q_is_group)
        return o.reshape(x.shape[0], -1)
