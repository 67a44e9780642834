"""Absorbed MLA attention of one layer, heads split over attention TP.

    q_nope @ w_kc -> latent query;  [q_lat, rope(q_pe)] . [norm(c_kv), rope(k_pe)]  (R-dim dot)
    o_lat @ w_vc -> per-head value;  o_proj (row-parallel) -> all-reduce over attention TP

kv_b_proj rows per head are [nope rows of W_k | v rows of W_v], each [*, kv_lora_rank]; so
w_kc[h] = W_k[h] ([nope, L]) and w_vc[h] = W_v[h]^T ([L, v]).
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from dcpctl.runtime.attention.api import AttentionContext
from dcpctl.runtime.models.checkpoint import Want
from dcpctl.runtime.models.config import MlaConfig
from dcpctl.runtime.models.ops import all_reduce, rms_norm
from dcpctl.runtime.models.quant import linear
from dcpctl.runtime.models.rope import Rotary
from dcpctl.runtime.models.shards import Shards

LATENT_NORM_EPS = 1e-6  # q_a_layernorm / kv_a_layernorm use the default eps in HF and DeepSeek


def attention_wants(cfg: MlaConfig, p: str, s: Shards) -> list[Want]:
    """Tensors of one attention layer under prefix p (e.g. 'model.layers.3.self_attn.')."""
    D, H, qk, L = cfg.hidden_size, cfg.num_heads, cfg.qk_head_dim, cfg.kv_lora_rank
    kvh = cfg.qk_nope_head_dim + cfg.v_head_dim
    q_rows = (s.q_head_start * qk, (s.q_head_start + s.q_heads) * qk)
    wants = [
        Want(p + "kv_a_proj_with_mqa.weight", (L + cfg.qk_rope_head_dim, D), fp8_ok=True),
        Want(p + "kv_a_layernorm.weight", (L,)),
        # kv_b_proj is split into w_kc / w_vc for absorbed MLA: always dequantized
        Want(p + "kv_b_proj.weight", (H * kvh, L), 0, s.q_head_start * kvh, (s.q_head_start + s.q_heads) * kvh),
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
                 rotary: Rotary, scale: float, group: Any):
        self.cfg, self.layer, self.rotary, self.scale, self.group = cfg, layer, rotary, scale, group
        self.upcast = rotary.upcast
        self.q_is_group, self.heads, self.q_heads = s.q_is_group, s.heads, s.q_heads
        self.q_a = t.get(p + "q_a_proj.weight")
        self.q_a_norm = t.get(p + "q_a_layernorm.weight")
        self.q_b = t[p + "q_b_proj.weight"] if cfg.q_lora_rank is not None else t[p + "q_proj.weight"]
        self.kv_a = t[p + "kv_a_proj_with_mqa.weight"]
        self.kv_a_norm = t[p + "kv_a_layernorm.weight"]
        nope, L = cfg.qk_nope_head_dim, cfg.kv_lora_rank
        kv_b = t[p + "kv_b_proj.weight"].view(s.q_heads, nope + cfg.v_head_dim, L)
        self.w_kc = kv_b[:, :nope, :].contiguous()  # [Hq, nope, L]
        off = s.head_start - s.q_head_start
        self.w_vc = kv_b[off:off + s.heads, nope:, :].transpose(1, 2).contiguous()  # [Hl, L, v]
        self.o_proj = t[p + "o_proj.weight"]  # [D, Hl * v]

    def _q(self, x: Tensor) -> Tensor:
        # x: [T, D] -> [T, Hq, qk_head_dim]
        if self.q_a is not None:
            x = rms_norm(linear(x, self.q_a), self.q_a_norm, LATENT_NORM_EPS, self.upcast)
        return linear(x, self.q_b).view(x.shape[0], self.q_heads, self.cfg.qk_head_dim)

    def latent_qkv(self, x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
        # x: [T, D] -> q: [T, Hq, R] absorbed query, kv_new: [T, R] latent rows
        cfg = self.cfg
        q_nope, q_pe = self._q(x).split([cfg.qk_nope_head_dim, cfg.qk_rope_head_dim], dim=-1)
        c_kv, k_pe = linear(x, self.kv_a).split([cfg.kv_lora_rank, cfg.qk_rope_head_dim], dim=-1)
        c_kv = rms_norm(c_kv, self.kv_a_norm, LATENT_NORM_EPS, self.upcast)
        q_lat = torch.einsum("thn,hnl->thl", q_nope, self.w_kc)
        q = torch.cat([q_lat, self.rotary.apply(q_pe, cos, sin)], dim=-1)
        return q, torch.cat([c_kv, self.rotary.apply(k_pe, cos, sin)], dim=-1)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, ctx: AttentionContext) -> Tensor:
        # x: [T, D] -> [T, D] summed over attention TP
        q, kv_new = self.latent_qkv(x, cos, sin)
        o = ctx.attend(self.layer, q, kv_new, self.scale, q_is_group=self.q_is_group)  # [T, Hl, L]
        v = torch.einsum("thl,hlv->thv", o, self.w_vc).reshape(x.shape[0], self.heads * self.cfg.v_head_dim)
        return all_reduce(linear(v, self.o_proj), self.group)
