"""Virtual KV allocator (plain ints, no torch): identical on every rank of a DCP group.

Each rank has `C` physical rows in pages of `P`; the DCP group of size `c` sees one virtual pool

    virtual capacity = C * c        virtual page size = P * c
    owner(v) = v % c                physical(v) = v // c

A sequence takes whole widened pages, so position p sits on virtual slot
`v = page[p // (P*c)] * (P*c) + p % (P*c)` and `v % c == p % c` (P*c is a multiple of c): the
owner of a position never depends on which page it got, and shards stay within one token.

The stripe rule lives here and nowhere else: `owner`, `physical` (ints or tensors alike), `owned`
(the positions of a range one rank stores), `virtual_slot` (position -> slot through the page list)
`owned_rows` / `owned_page_rows_tensor` (the physical rows of one rank's positions of a range, from a
request's slot map or its page list) and `local_len` / `local_len_sum` (how many positions below a length one
rank stores).
"""
from __future__ import annotations

from collections import deque
from typing import Any, TypeVar

import torch
from torch import Tensor

I = TypeVar("I")  # noqa: E741  an int, or an integer tensor (the same two operators serve both)


class AllocatorError(RuntimeError):
    """Raised on misuse (unknown request, out of pages) and on a broken invariant."""


def owner(v: I, c: int) -> I:
    """The DCP rank (of `c`) that stores virtual slot or position `v`."""
    return v % c  # type: ignore[operator]


def physical(v: I, c: int) -> I:
    """The physical row of virtual slot `v` on its owner."""
    return v // c  # type: ignore[operator]


def owned(start: int, end: int, rank: int, c: int) -> range:
    """The positions p in [start, end) with owner(p, c) == rank, in order."""
    return range(start + (rank - start) % c, end, c)


def virtual_slot(pages: Any, p: I, page_tokens: int) -> I:
    """The virtual slot of position `p` of a request holding widened `pages` of `page_tokens` slots (ints, or
    positions as a tensor with the pages as one)."""
    return pages[p // page_tokens] * page_tokens + p % page_tokens


def owned_page_rows_tensor(pages: Tensor, start: int, end: int, rank: int, c: int, page_tokens: int,
                           base: int = 0) -> tuple[Tensor, Tensor]:
    """For `rank`'s positions p in [start, end): (base + p - start, physical(virtual_slot(pages, p))) as host
    int64 tensors, from a request's widened page list as a tensor (every decode step and prefill chunk: a
    chunk's thousands of rows in a few vector ops)."""
    r = owned(start, end, rank, c)
    p = torch.arange(r.start, max(r.start, r.stop), r.step)
    return p - start + base, physical(virtual_slot(pages, p, page_tokens), c)


def owned_rows(slots: list[int], start: int, end: int, rank: int, c: int) -> list[int]:
    """Physical rows of the positions in [start, end) that `rank` stores, from a request's slot map."""
    return [physical(slots[p], c) for p in owned(start, end, rank, c)]


def local_len(length: int, rank: int, c: int) -> int:
    """Positions of a length-`length` sequence that DCP rank `rank` of `c` stores."""
    return length // c + (rank < length % c)


def local_len_sum(lengths: Any, rank: int, c: int) -> int:
    """sum(local_len(n, rank, c) for n in lengths): a decode step's rows, one call (at c = 1 every row is
    local)."""
    return sum(lengths) if c == 1 else sum(local_len(n, rank, c) for n in lengths)


class VirtualAllocator:
    """Pages of `page_size * dcp` virtual slots; one request-to-token map shared by all ranks."""

    def __init__(self, capacity_tokens: int, page_size: int, dcp: int) -> None:
        if page_size < 1 or dcp < 1 or capacity_tokens < page_size:
            raise AllocatorError(f"need page_size (={page_size}) >= 1, dcp (={dcp}) >= 1, "
                                 f"capacity_tokens (={capacity_tokens}) >= page_size")
        self.dcp = dcp
        self.page_tokens = page_size * dcp          # virtual page size P*c
        self.num_pages = capacity_tokens // page_size  # one widened page = one physical page per rank
        self._free: deque[int] = deque(range(self.num_pages))
        self._pages: dict[int, list[int]] = {}      # request id -> its virtual pages, in order
        self._slots: dict[int, list[int]] = {}      # request id -> virtual slot of each position
        self._held: set[int] = set()                # pages a prefix cache keeps after their request ended

    @property
    def virtual_capacity(self) -> int:
        return self.num_pages * self.page_tokens

    @property
    def free_pages(self) -> int:
        return len(self._free)

    def pages_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.page_tokens)

    def can_allocate(self, num_tokens: int, rid: int | None = None) -> bool:
        """Whether request `rid` (new when None) can grow to `num_tokens` positions."""
        have = len(self._pages.get(rid, ())) if rid is not None else 0
        return self.pages_for(num_tokens) - have <= len(self._free)

    def allocate(self, rid: int, num_tokens: int) -> list[int]:
        """Grow (or create) request `rid` to `num_tokens` positions; returns its virtual slots."""
        if not self.can_allocate(num_tokens, rid):
            raise AllocatorError(f"request {rid}: needs pages_for({num_tokens}) = "
                                 f"{self.pages_for(num_tokens)} pages, free_pages = {len(self._free)}")
        pages = self._pages.setdefault(rid, [])
        slots = self._slots.setdefault(rid, [])
        while len(pages) < self.pages_for(num_tokens):
            pages.append(self._free.popleft())
        slots += [virtual_slot(pages, p, self.page_tokens)
                  for p in range(len(slots), max(num_tokens, len(slots)))]
        return slots

    def grow(self, rid: int, num_tokens: int) -> None:
        """allocate(rid, num_tokens) when the request holds fewer slots (a decode step's one new position:
        O(1))."""
        slots = self.slots(rid)
        p = len(slots)
        if num_tokens <= p:
            return
        pages = self._pages[rid]
        if num_tokens == p + 1 and p // self.page_tokens < len(pages):   # the position's page is held already
            slots.append(virtual_slot(pages, p, self.page_tokens))
        else:
            self.allocate(rid, num_tokens)

    def slots(self, rid: int) -> list[int]:
        if rid not in self._slots:
            raise AllocatorError(f"unknown request {rid}; known: {sorted(self._slots)}")
        return self._slots[rid]

    def pages(self, rid: int) -> list[int]:
        """The live list of `rid`'s pages, not a copy (callers must not mutate it): it only grows by
        appending while the request lives, and `free` drops it, so a request re-created under the same
        id gets a new list.  attention/block_table.py relies on both (list identity = version)."""
        if rid not in self._pages:
            raise AllocatorError(f"unknown request {rid}; known: {sorted(self._pages)}")
        return self._pages[rid]

    def free(self, rid: int, keep: set[int] | frozenset[int] = frozenset()) -> None:
        """Free request `rid`; its pages listed in `keep` become held (a cache owns them) instead."""
        if rid not in self._pages:
            raise AllocatorError(f"free of unknown request {rid}; known: {sorted(self._pages)}")
        pages = self._pages.pop(rid)
        if not keep <= set(pages):
            raise AllocatorError(f"request {rid}: keep {sorted(keep)} is not a subset of its pages {pages}")
        self._free.extend(p for p in pages if p not in keep)
        self._held.update(keep)
        del self._slots[rid]

    @property
    def held_pages(self) -> int:
        return len(self._held)

    def release(self, page: int) -> None:
        """Return a held page to the free list (its cache entry moved to host or was dropped)."""
        if page not in self._held:
            raise AllocatorError(f"release of page {page}, which is not held; held: {sorted(self._held)}")
        self._held.remove(page)
        self._free.append(page)

    def requests(self) -> list[int]:
        return list(self._pages)

    def check_counts(self) -> None:
        """The page-accounting invariant alone (free + used + held = num_pages), O(requests): cheap enough
        for every finished request; a leaked or double-freed page breaks it."""
        used = sum(len(p) for p in self._pages.values())
        if len(self._free) + used + len(self._held) != self.num_pages:
            held = f" + held_pages({len(self._held)})" if self._held else ""
            raise AllocatorError(f"free_pages({len(self._free)}) + used_pages({used}){held} "
                                 f"!= num_pages({self.num_pages})")

    def check_integrity(self) -> None:
        """Raise AllocatorError naming every term of the first broken invariant.  O(held tokens): every
        slot's owner is checked, so the engine runs it when it drains, not per finished request."""
        self.check_counts()
        seen = set(self._free).union(self._held, *self._pages.values())
        if len(seen) != self.num_pages:
            raise AllocatorError(f"distinct_pages({len(seen)}) != num_pages({self.num_pages}): "
                                 "a page is in two of free, held and used, or used twice")
        for rid, slots in self._slots.items():
            self._check_request(rid, slots)

    def _check_request(self, rid: int, slots: list[int]) -> None:
        cap = len(self._pages[rid]) * self.page_tokens
        if len(slots) > cap:
            raise AllocatorError(f"request {rid}: tokens({len(slots)}) > pages({len(self._pages[rid])}) "
                                 f"* page_tokens({self.page_tokens})")
        for p, v in enumerate(slots):
            if owner(v, self.dcp) != owner(p, self.dcp):
                raise AllocatorError(f"request {rid}: owner(slot {v}) = {owner(v, self.dcp)} "
                                     f"!= position {p} % dcp({self.dcp}) = {owner(p, self.dcp)}")
