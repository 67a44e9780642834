"""Kimi Delta Attention (KDA) of one layer, heads split over attention TP.

Per token t of a request, per head (q, k l2-normalized, q scaled by head_dim^-0.5):

    x_qkv   = silu(causal depthwise conv over the last K inputs of [q_proj x | k_proj x | v_proj x])
    g       = -exp(A_log) * softplus(f_b(f_a x) + dt_bias)          per key channel  [dk]
    beta    = sigmoid(b_proj x)                                     per head
    S       = S * exp(g)[:, None]                                   S: [dk, dv]
    S       = S + k (beta * (v - k^T S))^T                          (delta rule)
    o       = q^T S
    out     = o_proj(rms_norm(o) * o_norm.weight * sigmoid(g_b(g_a x)))

The recurrence (kda_ops: step form for decode batches, chunked form otherwise) runs in the upcast
dtype (fp32 as transformers' torch fallback, float64 for float64 models); conv and recurrent states
live in the KdaStatePool slot of each request. All spans of a batch run together as [n, max_len]
with pad steps (g = 0, beta = 0) that leave S as is.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from dcpctl.runtime.models.checkpoint import Want
from dcpctl.runtime.models.kda_ops import chunked_kda, recurrent_kda
from dcpctl.runtime.models.kda_state import KdaBatch, KdaStatePool
from dcpctl.runtime.models.kimi_config import HybridConfig
from dcpctl.runtime.collectives import all_reduce
from dcpctl.runtime.models.shards import split

L2_EPS = 1e-6  # FLA's l2norm: x / sqrt(sum(x^2) + eps)
SOFTPLUS_LINEAR = 20.0  # softplus(x) = x above this, as transformers


def kda_heads(hc: HybridConfig, attn_tp: int, rank: int) -> tuple[int, int]:
    return split(hc.kda.num_heads, attn_tp, rank, "linear_attn_config.num_heads", "attn_tp")


def kda_wants(hc: HybridConfig, p: str, attn_tp: int, rank: int, upcast: torch.dtype,
              flat_a_log: bool = False) -> list[Want]:
    """Tensors of one KDA layer under prefix p (checkpoint names: q_conv1d, f_a_proj, A_log, ...).

    A_log is [1, 1, H, 1] as transformers stores it, or [H] (flat_a_log) as FLA-style checkpoints may."""
    D, H, dk, K = hc.mla.hidden_size, hc.kda.num_heads, hc.kda.head_dim, hc.kda.conv_kernel
    h0, h1 = kda_heads(hc, attn_tp, rank)
    r0, r1 = h0 * dk, h1 * dk
    rows = lambda name, shape: Want(p + name, shape, 0, r0, r1)  # noqa: E731
    wants = [rows(f"{x}_proj.weight", (H * dk, D)) for x in "qkv"]
    wants += [rows(f"{x}_conv1d.weight", (H * dk, 1, K)) for x in "qkv"]
    wants += [Want(p + "f_a_proj.weight", (dk, D)), rows("f_b_proj.weight", (H * dk, dk)),
              Want(p + "dt_bias", (H * dk,), 0, r0, r1, dtype=upcast),
              Want(p + "A_log", (H,), 0, h0, h1)
              if flat_a_log else Want(p + "A_log", (1, 1, H, 1), 2, h0, h1),
              Want(p + "b_proj.weight", (H, D), 0, h0, h1),
              Want(p + "g_a_proj.weight", (dk, D)), rows("g_b_proj.weight", (H * dk, dk)),
              Want(p + "o_norm.weight", (dk,)), Want(p + "o_proj.weight", (D, H * dk), 1, r0, r1)]
    return wants


def _l2norm(x: Tensor) -> Tensor:
    # x: [..., d] -> [..., d] unit L2 norm over the last dim (L2_EPS inside the root)
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + L2_EPS)


class KdaAttention:
    def __init__(self, hc: HybridConfig, index: int, p: str, t: dict[str, Tensor], heads: int,
                 upcast: torch.dtype, group: Any):
        self.index, self.heads, self.dk, self.upcast, self.group = (index, heads, hc.kda.head_dim, upcast,
                                                                    group)
        self.eps = hc.mla.rms_norm_eps
        self.w_qkv = [t[p + f"{x}_proj.weight"] for x in "qkv"]  # 3 x [C, D], C = heads * dk (separate
        # GEMMs: a fused [3C, D] one rounds differently, and fp32 stages downstream amplify that)
        self.conv_w = torch.cat([t[p + f"{x}_conv1d.weight"] for x in "qkv"])  # [3C, 1, K]
        self.f_a, self.f_b = t[p + "f_a_proj.weight"], t[p + "f_b_proj.weight"]
        self.dt_bias = t[p + "dt_bias"]
        self.neg_a = -t[p + "A_log"].to(upcast).reshape(heads, 1).exp()  # [Hl, 1]
        self.b_proj, self.g_a, self.g_b = (t[p + "b_proj.weight"], t[p + "g_a_proj.weight"],
                                           t[p + "g_b_proj.weight"])
        self.o_norm, self.o_proj = t[p + "o_norm.weight"], t[p + "o_proj.weight"]

    def forward(self, x: Tensor, batch: KdaBatch, pool: KdaStatePool) -> Tensor:
        # x: [T, D] -> [T, D] summed over attention TP (pad rows give zero before o_proj)
        T, n = x.shape[0], batch.num_spans
        o = x.new_zeros(T, self.heads, self.dk)
        if n:
            real = x[:batch.flat.numel()]
            mixed = torch.cat([F.linear(real, w) for w in self.w_qkv], dim=-1)  # [T', 3C]
            qkv = self._conv(mixed, batch, pool)  # [n, Lm, 3C]
            g = self._pad(self._decay(real), batch)  # [n, Lm, Hl, dk]
            beta = self._pad(torch.sigmoid(F.linear(real, self.b_proj)).to(self.upcast), batch)  # [n, Lm, Hl]
            core = self._recur(qkv, g, beta, batch, pool)  # [n, Lm, Hl, dv]
            o[:real.shape[0]] = core.reshape(-1, self.heads, self.dk)[batch.flat].to(x.dtype)
        gate = F.linear(F.linear(x, self.g_a), self.g_b).view(T, self.heads, self.dk)
        out = self._gated_norm(o, gate).reshape(T, self.heads * self.dk)
        return all_reduce(F.linear(out, self.o_proj), self.group)

    def _pad(self, v: Tensor, batch: KdaBatch) -> Tensor:
        # v: [T', ...] rows in batch order -> [n, max_len, ...], zeros at pad steps
        out = v.new_zeros(batch.num_spans * batch.max_len, *v.shape[1:])
        out[batch.flat] = v
        return out.view(batch.num_spans, batch.max_len, *v.shape[1:])

    def _conv(self, mixed: Tensor, batch: KdaBatch, pool: KdaStatePool) -> Tensor:
        # mixed: [T', 3C] -> [n, Lm, 3C] = silu(conv(state ++ inputs)); the state keeps the last K-1 inputs
        conv = pool.conv[self.index]  # [slots, K-1, 3C]
        prev = conv.index_select(0, batch.slots).masked_fill(batch.fresh[:, None, None], 0.0)
        full = torch.cat([prev, self._pad(mixed, batch).to(prev.dtype)], dim=1)  # [n, K-1+Lm, 3C]
        k1 = prev.shape[1]
        ends = batch.lens[:, None] + torch.arange(k1, device=full.device)[None, :]  # rows [len, len+K-1)
        conv.index_copy_(0, batch.slots, full.gather(1, ends[..., None].expand(-1, -1, full.shape[2])))
        out = F.conv1d(full.transpose(1, 2).to(self.conv_w.dtype), self.conv_w, groups=self.conv_w.shape[0])
        return F.silu(out).transpose(1, 2).to(mixed.dtype)

    def _decay(self, x: Tensor) -> Tensor:
        # x: [T', D] -> g: [T', Hl, dk] log-decay per key channel, in upcast
        z = F.linear(F.linear(x, self.f_a), self.f_b).to(self.upcast) + self.dt_bias.to(self.upcast)
        soft = torch.where(z > SOFTPLUS_LINEAR, z, torch.log(1.0 + torch.exp(z)))
        return self.neg_a * soft.view(-1, self.heads, self.dk)

    def _recur(self, qkv: Tensor, g: Tensor, beta: Tensor, batch: KdaBatch, pool: KdaStatePool) -> Tensor:
        # qkv: [n, Lm, 3C]  g: [n, Lm, Hl, dk]  beta: [n, Lm, Hl] -> o: [n, Lm, Hl, dv] (upcast)
        n, Lm = qkv.shape[:2]
        q, k, v = qkv.to(self.upcast).view(n, Lm, 3, self.heads, self.dk).unbind(2)
        q, k = _l2norm(q) * (1 / self.dk ** 0.5), _l2norm(k)
        rec = pool.rec[self.index]
        S = (rec.index_select(0, batch.slots).to(self.upcast)
             .masked_fill(batch.fresh[:, None, None, None], 0.0))
        step = recurrent_kda if Lm == 1 else chunked_kda  # transformers' choice: decode steps, prefill chunks
        out, S = step(q, k, v, g, beta, S)
        rec.index_copy_(0, batch.slots, S.to(rec.dtype))
        return out

    def _gated_norm(self, o: Tensor, gate: Tensor) -> Tensor:
        # o, gate: [T, Hl, dv] -> [T, Hl, dv]; normalized, weighted and gated in upcast, then cast back
        of = o.to(self.upcast)
        of = of * torch.rsqrt(of.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.o_norm.to(self.upcast) * of * torch.sigmoid(gate.to(self.upcast))).to(o.dtype)
