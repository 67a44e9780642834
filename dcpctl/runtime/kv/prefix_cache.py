"""Prefix cache of whole widened pages (plain ints, no torch): token prefix -> where its last page is.

Key of page i of a sequence = the tuple of its tokens [0, (i+1) * P*c): a page is reusable only
with exactly the same history, and a chain of keys is looked up from the first page until a miss.
Entries live on the device (pages the allocator holds) or on the host tier.  Recency is kept so that
a prefix is never older than its extensions (every touch walks a chain longest-first), so LRU
eviction removes leaves first; dropping an entry also drops every extension of it.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

DEVICE, HOST = "device", "host"


@dataclass
class Entry:
    tier: str   # DEVICE or HOST
    page: int   # virtual (widened) page id on the device, or host page id


class PrefixCache:
    def __init__(self, page_tokens: int) -> None:
        self.page_tokens = page_tokens
        self._entries: OrderedDict[tuple[int, ...], Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: tuple[int, ...]) -> bool:
        return key in self._entries

    def keys(self, tokens: list[int], num_pages: int) -> list[tuple[int, ...]]:
        w = self.page_tokens
        return [tuple(tokens[:(i + 1) * w]) for i in range(num_pages)]

    def match(self, tokens: list[int], max_pages: int) -> list[Entry]:
        """Entries of the longest cached chain of whole pages of `tokens` (at most max_pages); touched."""
        found: list[tuple[int, ...]] = []
        for key in self.keys(tokens, min(max_pages, len(tokens) // self.page_tokens)):
            if key not in self._entries:
                break
            found.append(key)
        self.touch(found)
        return [self._entries[k] for k in found]

    def insert(self, key: tuple[int, ...], entry: Entry) -> None:
        if key in self._entries:
            raise KeyError(f"prefix of {len(key)} tokens is already cached")
        self._entries[key] = entry

    def touch(self, chain: list[tuple[int, ...]]) -> None:
        # longest first: the shortest prefix ends most recent, so leaves are evicted before it
        for key in reversed(chain):
            self._entries.move_to_end(key)

    def lru(self, tier: str) -> tuple[int, ...] | None:
        """The least recently used key whose entry is on `tier`, or None."""
        return next((k for k, e in self._entries.items() if e.tier == tier), None)

    def get(self, key: tuple[int, ...]) -> Entry:
        return self._entries[key]

    def drop(self, key: tuple[int, ...]) -> list[Entry]:
        """Remove `key` and every cached extension of it; returns their entries (pages to free)."""
        n = len(key)
        gone = [k for k in self._entries if len(k) >= n and k[:n] == key]
        return [self._entries.pop(k) for k in gone]

    def entries(self) -> list[Entry]:
        return list(self._entries.values())
