"""Test-only helpers that drive DCP attention step by step on forked ranks (one DCP group of all ranks)."""
from __future__ import annotations

import torch

from dcpctl.runtime.attention.dcp import SeqChunk
from dcpctl.runtime.kv import VirtualAllocator
from dcpctl.runtime.parallel import ParallelState


def whole_world(world: int) -> ParallelState:
    """Every group (tp, attn_tp, attn_dp, dcp, ep) is all `world` ranks."""
    groups = {k: [list(range(world))] for k in ("tp", "attn_tp", "attn_dp", "dcp", "ep")}
    return ParallelState.build(groups) if world > 1 else ParallelState.single()


def seeded_qkv(lens: list[int], c: int, heads: int, row: int, seed: int) -> tuple[list, list]:
    # -> qs[i]: [lens[i], heads * c, row]  kvs[i]: [lens[i], row]  (float64; the whole group's heads)
    g = torch.Generator().manual_seed(seed)
    qs = [torch.randn(n, heads * c, row, generator=g, dtype=torch.float64) for n in lens]
    kvs = [torch.randn(n, row, generator=g, dtype=torch.float64) for n in lens]
    return qs, kvs


def grow(alloc: VirtualAllocator, chunks: list[SeqChunk]) -> None:
    """Every chunk's request holds at least its positions up to the chunk's end."""
    for ch in chunks:
        alloc.allocate(ch.rid, ch.start + ch.num_tokens)


def step_inputs(qs: list, kvs: list, chunks: list[SeqChunk], heads: slice, num_heads: int,
                pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    # -> q: [T + pad, num_heads, R]  kv: [T + pad, R]; the pad rows are NaN (garbage that must not leak)
    R = kvs[0].shape[1]
    q = torch.cat([qs[c.rid][c.start:c.start + c.num_tokens, heads] for c in chunks] or
                  [torch.zeros(0, num_heads, R, dtype=torch.float64)])
    kv = torch.cat([kvs[c.rid][c.start:c.start + c.num_tokens] for c in chunks] or
                   [torch.zeros(0, R, dtype=torch.float64)])
    q = torch.cat([q, torch.full((pad, *q.shape[1:]), float("nan"), dtype=q.dtype)])
    kv = torch.cat([kv, torch.full((pad, R), float("nan"), dtype=kv.dtype)])
    return q, kv
