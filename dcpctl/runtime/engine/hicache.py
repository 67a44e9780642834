"""HiCache L2 controller: a prefix cache of whole widened pages over the device pool and a host tier.

Policy (identical on every rank: it reads only allocator ints and token ids, so no rank talks to
another; each rank moves only its own rows, see kv/host_tier.py):

- finish: the request's full widened pages (positions < computed, in whole pages of P*c) that are
  not cached yet stay on the device as held pages (the allocator keeps them out of the free list);
- admission under pressure (the scheduler cannot allocate): the least recently used held pages are
  offloaded D2H to the host tier and freed; a full host tier drops its least recently used pages;
- admission of a request whose prompt starts with cached pages: its fresh pages receive the prefix
  (H2D from the host, or a device copy from a held page) and prefill starts after it.  At least the
  last prompt token is always computed, so its logits exist.

Launch config: `hicache: {host_pages: N}` (N >= 0 pages of P local rows per rank).  The launch
config refuses it with `speculative` and on a PD decode instance (docs/design.md section 5); here it is
refused with request-indexed state (hybrid KDA models), whose prefill cannot be skipped.
"""
from __future__ import annotations

from typing import Any

from dcpctl.contract.launch_config import HiCacheSection
from dcpctl.runtime.engine.request import Sequence
from dcpctl.runtime.kv.allocator import VirtualAllocator
from dcpctl.runtime.kv.host_tier import HostTier
from dcpctl.runtime.kv.pool import KVPool
from dcpctl.runtime.kv.prefix_cache import DEVICE, HOST, Entry, PrefixCache
from dcpctl.runtime.parallel import Axis


class HiCacheError(ValueError):
    """The host tier cannot serve this model (request-indexed state)."""


class HiCache:
    def __init__(self, alloc: VirtualAllocator, pool: KVPool, page_size: int, dcp: Axis,
                 host_pages: int) -> None:
        self.alloc = alloc
        self.host = HostTier(pool, host_pages, page_size, dcp.size, dcp.rank)
        self.cache = PrefixCache(alloc.page_tokens)
        self.hit_tokens = 0       # prompt tokens restored instead of prefilled

    @staticmethod
    def from_section(section: HiCacheSection | None, alloc: VirtualAllocator, pool: KVPool, page_size: int,
                     dcp: Axis, state_pool: Any = None) -> "HiCache | None":
        """The controller for the launch config's `hicache` section, or None when it has none.

        Which sections compose is the launch config's rule (LaunchConfig); the model's own state is checked
        here."""
        if section is None:
            return None
        if state_pool is not None:
            raise HiCacheError("hicache needs every layer's state in the paged KV; this model keeps "
                               "request-indexed KDA state, so a cached prefix cannot skip prefill")
        return HiCache(alloc, pool, page_size, dcp, section.host_pages)

    # -- scheduler hooks -------------------------------------------------------------------------
    def keep(self, seq: Sequence) -> set[int]:
        """On finish: device pages of seq's not-yet-cached full pages, which the allocator then holds."""
        pages, keep = self.alloc.pages(seq.rid), set()
        chain = self.cache.keys(seq.tokens, seq.computed // self.alloc.page_tokens)
        for i, key in enumerate(chain):
            if key not in self.cache:
                self.cache.insert(key, Entry(DEVICE, pages[i]))
                keep.add(pages[i])
        self.cache.touch(chain)
        return keep

    def reclaim(self, pages_needed: int) -> bool:
        """Offload held device pages (LRU first) until `pages_needed` are free; whether they are."""
        while self.alloc.free_pages < pages_needed:
            key = self.cache.lru(DEVICE)
            if key is None:
                return False
            self._offload(key)
        return True

    def admit(self, seq: Sequence) -> None:
        """After allocation: restore the longest cached prefix of what it prefills (all but its last token;
        after a retraction the prompt and the tokens it produced)."""
        hits = self.cache.match(seq.token_slice(0, seq.prefill_to),
                                (seq.prefill_to - 1) // self.alloc.page_tokens)
        dst = self.alloc.pages(seq.rid)[:len(hits)]
        on_host = [(e.page, d) for e, d in zip(hits, dst) if e.tier == HOST]
        on_dev = [(e.page, d) for e, d in zip(hits, dst) if e.tier == DEVICE]
        if on_host:
            self.host.restore(*map(list, zip(*on_host)))
        if on_dev:
            self.host.copy_device(*map(list, zip(*on_dev)))
        seq.computed = len(hits) * self.alloc.page_tokens
        self.hit_tokens += seq.computed

    # -- tiers -----------------------------------------------------------------------------------
    def _offload(self, key: tuple[int, ...]) -> None:
        entry = self.cache.get(key)
        if not self._make_host_room(key):
            self._drop(key)
            return
        host_page = self.host.allocate()
        self.host.offload([entry.page], [host_page])
        self.alloc.release(entry.page)
        entry.tier, entry.page = HOST, host_page

    def _make_host_room(self, keep: tuple[int, ...]) -> bool:
        while self.host.free_pages == 0:
            victim = self.cache.lru(HOST)
            if victim is None or keep[:len(victim)] == victim:  # never drop the page's own prefix
                return False
            self._drop(victim)
        return True

    def _drop(self, key: tuple[int, ...]) -> None:
        for e in self.cache.drop(key):
            (self.alloc.release if e.tier == DEVICE else self.host.free)(e.page)

    def stats(self) -> dict[str, int]:
        return {"hit_tokens": self.hit_tokens, "d2h_pages": self.host.d2h_pages,
                "h2d_pages": self.host.h2d_pages, "d2d_pages": self.host.d2d_pages,
                "device_entries": sum(e.tier == DEVICE for e in self.cache.entries()),
                "host_entries": sum(e.tier == HOST for e in self.cache.entries())}
