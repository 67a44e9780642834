"""A persistent device block table for the decode graphs, updated with only what changed per step.

The table is a given device tensor [rows + 1, max_pages] int32 (the graphs' static `block_table`;
the last row is never written: the empty row).  A host mirror keeps per row the request id, its
page list (the allocator's live list, see below) and how many leading entries the device row holds
(`written`).  Invariant: for every mirrored row, device[row, :written] == pages[:written].

`update` gets (row, rid, needed, pages) per batch row, where `needed` = pages_for(end) and `pages`
is `alloc.pages(rid)`, and writes per row:

| row state before                            | action                                          |
| ------------------------------------------- | ----------------------------------------------- |
| same rid, same list object                  | append pages[written:needed] (none mostly)      |
| rid mirrored in another row, same list      | move that row on the device, then append        |
| anything else (new rid, or a new list)      | write pages[:needed] whole                      |

Why list identity is the version check: the allocator's lists only grow by appending while their
request lives, and `free` drops the list, so a request re-created under the same id (a preemption,
a reallocation) gets a new list object; the mirror holds a reference, so identity is never reused.

Why stale entries are never read: after a whole write `written` = needed, so entries past it are
stale (an older request's pages).  The kernel (and the reference) read row b only at local rows
j < local_lens[b] = local_len(end, r, c); local row j is global position j*c + r, on virtual page
(j*c + r) // (P*c) = j // P <= (end - 1) // (P*c) < pages_for(end) = needed.  So only the first
`needed` entries are ever read, even though max_local_len (fixed at capture) spans the whole row;
rows of pads and unused rows have local_lens 0 and are read not at all.  Nothing is cleared.

Host work per step is O(batch + changed entries); a step with no change (most steps: a request
crosses a page boundary once every P*c steps) touches the device not at all.  Changes go down as
one host int64 buffer (pinned on CUDA, fresh per step, so the non_blocking copy never races a later
host write): a row gather for moves, then one flat scatter of the appended entries (the host sends each one's
flat index and page: two ints an entry, three device ops a step that writes).
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import torch
from torch import Tensor

from dcpctl.runtime.attention.layout import host_ints, to_device


class RowState(NamedTuple):
    rid: int
    pages: list[int]      # the allocator's live list for rid (identity = version)
    written: int          # device[row, :written] == pages[:written]


class Written(NamedTuple):
    entries: int          # table entries scattered this step
    moved: int            # rows copied on the device from another row


class _Changes:
    """One step's writes: appended entries (flat index into the table, page) and row moves."""

    def __init__(self) -> None:
        self.idx: list[int] = []
        self.vals: list[int] = []
        self.moves: list[tuple[int, int]] = []     # (src, dst), read before any write of this step

    def append(self, flat_start: int, pages: list[int]) -> None:
        self.idx += range(flat_start, flat_start + len(pages))
        self.vals += pages


Assignment = tuple[int, int, int, list[int]]     # (row, rid, needed pages, alloc.pages(rid))


class DeviceBlockTable:
    """Rows of `table` [rows + 1, max_pages] int32 kept equal to their requests' page lists (module
    docstring)."""

    def __init__(self, table: Tensor) -> None:
        if table.dim() != 2 or table.dtype != torch.int32 or not table.is_contiguous():
            raise ValueError(f"block table must be a contiguous 2-D int32 tensor, got {table.dtype} "
                             f"{tuple(table.shape)}")
        self.table = table
        self.rows, self.width = table.shape[0] - 1, table.shape[1]
        self._state: list[RowState | None] = [None] * self.rows
        self._where: dict[int, int] = {}          # rid -> its one mirrored row

    def update(self, assignments: Sequence[Assignment]) -> Written:
        """Bring each assigned row's first `needed` entries up to date; returns what was written."""
        self._check_unique(assignments)
        ch = _Changes()
        new: list[tuple[int, RowState]] = []
        width, state = self.width, self._state
        for row, rid, needed, pages in assignments:
            self._check(row, rid, needed, pages)
            st = state[row]
            if st is not None and st.rid == rid and st.pages is pages and needed <= st.written:
                continue        # most rows of most steps: nothing to write, the mirror stays as it is
            if st is None or st.rid != rid or st.pages is not pages:
                src = self._where.get(rid)
                if src is not None and state[src].pages is pages:
                    ch.moves.append((src, row))
                    st = state[src]
                else:
                    st = RowState(rid, pages, 0)
            if needed > st.written:
                ch.append(row * width + st.written, pages[st.written:needed])
            new.append((row, RowState(rid, pages, max(st.written, needed))))
        self._apply(ch)
        self._remirror(new)
        return Written(len(ch.vals), len(ch.moves))

    def _check_unique(self, assignments: Sequence[Assignment]) -> None:
        for k, what in ((0, "rows"), (1, "request ids")):
            if len({a[k] for a in assignments}) != len(assignments):
                raise ValueError(f"block-table assignments repeat {what}: {[a[k] for a in assignments]}")

    def _check(self, row: int, rid: int, needed: int, pages: list[int]) -> None:
        if not 0 <= row < self.rows:
            raise ValueError(f"block-table row {row} not in [0, rows({self.rows}))")
        if not needed <= min(len(pages), self.width):
            raise ValueError(f"request {rid}: needed pages ({needed}) > min(allocated pages ({len(pages)}), "
                             f"table width ({self.width}))")

    def _apply(self, ch: _Changes) -> None:
        # one host buffer [flat index(k) | page(k) | src(m) | dst(m)] -> one copy -> row gather, flat scatter
        if not ch.vals and not ch.moves:
            return
        k, m = len(ch.vals), len(ch.moves)
        host = ch.idx + ch.vals + [a for a, _ in ch.moves] + [b for _, b in ch.moves]
        buf = to_device(host_ints(host), self.table.device)   # pinned, not blocking: the allocator keeps the
                                                              # block
        if m:
            self.table.index_copy_(0, buf[2 * k + m:], self.table.index_select(0, buf[2 * k:2 * k + m]))
        if k:
            self.table.view(-1).index_copy_(0, buf[:k], buf[k:2 * k].to(torch.int32))

    def _remirror(self, new: list[tuple[int, RowState]]) -> None:
        # keep one mirrored row per rid: a moved-from (or outdated) row that nobody reassigned is forgotten
        for row, _ in new:
            st = self._state[row]
            if st is not None and self._where.get(st.rid) == row:
                del self._where[st.rid]
        for row, st in new:
            other = self._where.get(st.rid)     # an unassigned row (rids are unique per step)
            if other is not None:
                self._state[other] = None
            self._state[row] = st
            self._where[st.rid] = row
