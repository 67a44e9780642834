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


DENSE_LIMIT = 1 << 22       # T * S up to which one block-diagonal matmul is used
BLOCK_ELEMS = 1 << 24       # score elements per query block on the per-chunk path


def segmented_attention(q: Tensor, kv: Tensor, q_pos: Tensor, kv_pos: Tensor, q_bounds: list[int],
                        kv_bounds: list[int], scale: float, v_dim: int,
                        lse_base: str = "e") -> tuple[Tensor, Tensor]:
    # q: [T, H, R]  kv: [S, R]  bounds: n+1 offsets per chunk -> o [T, H, v_dim], lse [T, H]
    # per chunk and query block, so memory stays O(block * S_chunk); rows past q_bounds[-1] (pads) see nothing
    dt = acc_dtype(q.dtype)
    o = torch.zeros(q.shape[0], q.shape[1], v_dim, dtype=dt, device=q.device)
    lse = torch.full(q.shape[:2], -torch.inf, dtype=dt, device=q.device)
    for i in range(len(q_bounds) - 1):
        ks, ke = kv_bounds[i], kv_bounds[i + 1]
        step = max(1, BLOCK_ELEMS // max(1, q.shape[1] * (ke - ks)))
        for b in range(q_bounds[i], q_bounds[i + 1], step):
            e = min(b + step, q_bounds[i + 1])
            mask = kv_pos[ks:ke].unsqueeze(0) <= q_pos[b:e].unsqueeze(1)
            o[b:e], lse[b:e] = local_attention(q[b:e], kv[ks:ke], mask, scale, v_dim, lse_base)
    return o, lse
