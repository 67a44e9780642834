"""Simulated DCP ranks in one process for the backend tests: each rank's shard as its own pool, and its decode
layout."""
from __future__ import annotations

from typing import Iterator

import torch

from dcpctl.runtime.attention.layout import SeqChunk
from dcpctl.runtime.attention.paged import PagedLayout, build_paged
from dcpctl.runtime.kv import KVPool, VirtualAllocator


def rank_shards(kv: torch.Tensor, lens: list[int], c: int, page: int, pad: int = 1,
                device: str = "cpu") -> Iterator[tuple[int, torch.Tensor, PagedLayout]]:
    """Per rank r of c: (r, its pool as [pages, page, R], the decode layout of every request's last position).
    kv: [B, Lmax, R] the requests' rows, written through the allocator's pages (owner(p) = p mod c)."""
    alloc = VirtualAllocator(4096, page, c)
    for rid, n in enumerate(lens):
        alloc.allocate(rid, n)
    flat = torch.cat([kv[b, :n] for b, n in enumerate(lens)])
    for r in range(c):
        pool = KVPool(1, (alloc.num_pages + 1) * page, kv.shape[-1], kv.dtype, device)
        fill = build_paged(alloc, [SeqChunk(rid, 0, n) for rid, n in enumerate(lens)], r, page, device)
        pool.write(0, fill.write_slots, flat.index_select(0, fill.write_rows))
        lay = build_paged(alloc, [SeqChunk(rid, n - 1, 1) for rid, n in enumerate(lens)], r, page, device,
                          pad=pad)
        yield r, pool.kv[0].view(-1, page, kv.shape[-1]), lay


def unsplit(lens: list[int], heads: int, scale: float, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """(q [B, H, 576], kv [B, Lmax, 576], o [B, H, 512], lse [B, H]): random rows and their unsplit
    attention."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(len(lens), heads, 576, generator=g)
    kv = torch.randn(len(lens), max(lens), 576, generator=g)
    lse = torch.stack([torch.logsumexp(q[b] @ kv[b, :n].T * scale, -1) for b, n in enumerate(lens)])
    o = torch.stack([torch.softmax(q[b] @ kv[b, :n].T * scale, -1) @ kv[b, :n, :512]
                     for b, n in enumerate(lens)])
    return q, kv, o, lse
