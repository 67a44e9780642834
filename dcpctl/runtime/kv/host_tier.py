"""HiCache L2: a per-rank host-memory copy of whole widened pages (docs/design.md section 5).

The controller (engine/hicache.py) thinks in widened pages of `P*c` virtual slots, identical on
every rank.  Each rank's device pool and host buffer store only its `P` local rows of a page, so a
transfer is, per rank and with no DCP collective:

    virtual slots of page g     = [g*P*c, (g+1)*P*c)
    owned (this rank's) slots   = v with v % c == rank      -> P of them
    physical row                = v // c                     -> [g*P, (g+1)*P), in position order

`local_rows` is that index translation; `HostTier` holds `[layers, num_host_pages * P, R]` rows
(pinned when the device is CUDA) and a free list of host pages (plain ints).
"""
from __future__ import annotations

from collections import deque

import torch

from dcpctl.runtime.kv.allocator import owner, physical
from dcpctl.runtime.kv.pool import KVPool


class HostTierError(RuntimeError):
    pass


def local_rows(virtual_slots: list[int], c: int, rank: int) -> list[int]:
    """Keep the slots this rank owns (v % c == rank) and map each to its physical row v // c."""
    return [physical(v, c) for v in virtual_slots if owner(v, c) == rank]


def page_rows(pages: list[int], page_size: int, c: int, rank: int) -> list[int]:
    """Physical rows of whole widened pages on this rank, via the virtual index translation."""
    width = page_size * c
    rows = local_rows([v for g in pages for v in range(g * width, (g + 1) * width)], c, rank)
    if len(rows) != len(pages) * page_size:  # whole pages: every rank owns exactly P slots of each
        raise HostTierError(f"rank {rank}: {len(rows)} owned rows != pages ({len(pages)}) * page_size "
                            f"({page_size})")
    return rows


class HostTier:
    """This rank's host buffer of `num_pages` pages of `page_size` local rows, for every KV layer."""

    def __init__(self, pool: KVPool, num_pages: int, page_size: int, c: int, rank: int) -> None:
        if num_pages < 0:
            raise HostTierError(f"host pages ({num_pages}) < 0")
        layers, _, row = pool.kv.shape
        pin = pool.kv.is_cuda  # pinned memory makes the H2D/D2H copies asynchronous-capable DMA
        self.kv = torch.zeros(layers, num_pages * page_size, row, dtype=pool.kv.dtype, pin_memory=pin)
        self.pool, self.page_size, self.c, self.rank = pool, page_size, c, rank
        self.num_pages = num_pages
        self._free: deque[int] = deque(range(num_pages))
        self.d2h_pages = self.h2d_pages = self.d2d_pages = 0

    @property
    def free_pages(self) -> int:
        return len(self._free)

    def allocate(self) -> int:
        if not self._free:
            raise HostTierError(f"no free host page (num_pages = {self.num_pages})")
        return self._free.popleft()

    def free(self, page: int) -> None:
        if page in self._free or not 0 <= page < self.num_pages:
            raise HostTierError(f"free of host page {page}: not allocated (num_pages = {self.num_pages})")
        self._free.append(page)

    def _host_rows(self, pages: list[int]) -> torch.Tensor:
        # -> [len(pages) * P] int64: every host row of `pages`, in page order
        p = self.page_size
        return torch.tensor([h * p + j for h in pages for j in range(p)], dtype=torch.int64)

    def offload(self, device_pages: list[int], host_pages: list[int]) -> None:
        """D2H: this rank's rows of whole widened `device_pages` into `host_pages`."""
        dev = torch.tensor(page_rows(device_pages, self.page_size, self.c, self.rank),
                           device=self.pool.kv.device)
        self.kv.index_copy_(1, self._host_rows(host_pages), self.pool.kv.index_select(1, dev).cpu())
        self.d2h_pages += len(device_pages)

    def restore(self, host_pages: list[int], device_pages: list[int]) -> None:
        """H2D: `host_pages` back into this rank's rows of whole widened `device_pages`."""
        dev = torch.tensor(page_rows(device_pages, self.page_size, self.c, self.rank),
                           device=self.pool.kv.device)
        rows = self.kv.index_select(1, self._host_rows(host_pages)).to(self.pool.kv.device, non_blocking=True)
        self.pool.kv.index_copy_(1, dev, rows)
        self.h2d_pages += len(device_pages)

    def copy_device(self, src_pages: list[int], dst_pages: list[int]) -> None:
        """D2D: a prefix still held on the device into a new request's pages (same translation)."""
        src = torch.tensor(page_rows(src_pages, self.page_size, self.c, self.rank),
                           device=self.pool.kv.device)
        dst = torch.tensor(page_rows(dst_pages, self.page_size, self.c, self.rank),
                           device=self.pool.kv.device)
        self.pool.kv.index_copy_(1, dst, self.pool.kv.index_select(1, src))
        self.d2d_pages += len(src_pages)
