"""Exact merge of locally normalized attention partials (one pure function, no collectives).

Every shard r returns o_r (softmax-normalized over its own keys) and lse_r (log-sum-exp of its
scores, in base e or 2 depending on the kernel).  With everything in base e:

    lse = logsumexp_r(lse_r)            o = sum_r exp(lse_r - lse) * o_r

accumulated in fp32 (float64 when the inputs are float64).  An empty shard has lse_r = -inf and
contributes nothing: its weight is masked with `where`, never multiplied by zero, because its o_r
may be NaN.  When every shard is empty the result is o = 0, lse = -inf.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

LSE_BASES = ("e", "2")


@dataclass
class Partial:
    """One shard's attention output and its LSE, tagged with the LSE base."""

    o: Tensor    # [..., L]
    lse: Tensor  # [...]
    base: str    # "e" or "2"


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def to_natural(lse: Tensor, base: str) -> Tensor:
    # lse: [...] -> [...] in base e, in the accumulation dtype
    if base not in LSE_BASES:
        raise ValueError(f"unknown LSE base {base!r}; valid: {list(LSE_BASES)}")
    lse = lse.to(acc_dtype(lse.dtype))
    return lse * math.log(2.0) if base == "2" else lse


def merge_weights(lse: Tensor) -> tuple[Tensor, Tensor]:
    # lse: [S, ...] natural -> (weights [S, ...] with 0 for empty shards, merged lse [...])
    valid = torch.isfinite(lse)
    m = torch.where(valid, lse, torch.full_like(lse, -torch.inf)).amax(0)
    m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.where(valid, torch.exp(lse - m_safe), torch.zeros_like(lse))
    total = e.sum(0)
    merged = torch.where(total > 0, m_safe + torch.log(total), torch.full_like(m, -torch.inf))
    w = torch.where(valid, torch.exp(lse - merged), torch.zeros_like(lse))
    return w, merged


def weighted_sum(o: Tensor, w: Tensor) -> Tensor:
    # o: [S, ..., L]  w: [S, ...] -> [..., L]; masked so NaN rows of empty shards never leak
    o = o.to(acc_dtype(o.dtype))
    keep = (w > 0).unsqueeze(-1)
    return torch.where(keep, o * w.unsqueeze(-1).to(o.dtype), torch.zeros_like(o)).sum(0)


def merge_stacked(o: Tensor, lse: Tensor, base: str) -> Partial:
    # o: [S, ..., L]  lse: [S, ...] in `base` -> Partial(o [..., L] acc dtype, lse [...] base e)
    w, merged = merge_weights(to_natural(lse, base))
    return Partial(weighted_sum(o, w), merged, "e")


def merge(parts: list[Partial]) -> Partial:
    """Merge partials of possibly different LSE bases; result in base e, accumulation dtype."""
    lse = torch.stack([to_natural(p.lse, p.base) for p in parts])
    o = torch.stack([p.o.to(acc_dtype(p.o.dtype)) for p in parts])
    return merge_stacked(o, lse, "e")
