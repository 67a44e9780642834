"""Reference local attention over one rank's KV shard: (o, lse) with causality by global position.

Used for prefill chunks, decode and multi-token verification alike: a query at global position p
of request s sees exactly the keys of request s whose global position is <= p.  The batch is one
dense score matrix with a block-diagonal causal mask (clear, and fast enough for CPU tests).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from dcpctl.runtime.attention.merge import acc_dtype


def attention_mask(q_pos: Tensor, q_seq: Tensor, kv_pos: Tensor, kv_seq: Tensor) -> Tensor:
    # q_pos, q_seq: [T]  kv_pos, kv_seq: [S] -> [T, S] bool (True = may attend)
    same = q_seq.unsqueeze(1) == kv_seq.unsqueeze(0)
    return same & (kv_pos.unsqueeze(0) <= q_pos.unsqueeze(1))


def local_attention(q: Tensor, kv: Tensor, mask: Tensor, scale: float, v_dim: int,
                    lse_base: str = "e") -> tuple[Tensor, Tensor]:
    # q: [T, H, R]  kv: [S, R]  mask: [T, S] -> o [T, H, v_dim] (acc dtype), lse [T, H] in lse_base
    dt = acc_dtype(q.dtype)
    scores = torch.einsum("thr,sr->ths", q.to(dt), kv.to(dt)) * scale
    scores = scores.masked_fill(~mask.unsqueeze(1), -torch.inf)
    lse = torch.logsumexp(scores, dim=-1)                      # -inf for rows that see no key
    finite = torch.isfinite(lse)
    p = torch.where(finite.unsqueeze(-1), torch.exp(scores - lse.unsqueeze(-1)), torch.zeros_like(scores))
    o = torch.einsum("ths,sl->thl", p, kv[:, :v_dim].to(dt))
    if lse_base == "2":
        lse = lse / math.log(2.0)
    return o, lse
