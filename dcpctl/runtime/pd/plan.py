"""The PD transfer plan (plain ints, no torch): which prefill rank sends which rows to which decode rank.

Built from the decode rank's DCP metadata (docs/design.md section 5), for a prompt of exactly L tokens:

| prefill dcp | decode dcp | path            | decode rank r (of c) receives                        |
| ----------- | ---------- | --------------- | ---------------------------------------------------- |
| c           | c          | page            | all rows of the prefill rank with DCP rank r         |
| 1           | c          | token relayout  | rows of positions p < L with p % c == r, in order    |
| other       |            | rejected        |                                                      |

A row of position p sits at local index p // c_prefill on its prefill owner, so one formula serves
both paths; only positions < L are ever selected, so a partial last page sends no stale row.
"""
from __future__ import annotations

from dataclasses import dataclass

from dcpctl.runtime.kv.allocator import owned, physical

PAGE, RELAYOUT = "page", "token_relayout"


class PDError(ValueError):
    """An unsupported prefill/decode pairing (sizes, attention DP, page size)."""


def transfer_path(prefill_dcp: int, decode_dcp: int) -> str:
    """PAGE for equal DCP sizes, RELAYOUT for DCP 1 prefill; every other pair raises PDError."""
    if prefill_dcp == decode_dcp:
        return PAGE
    if prefill_dcp == 1:
        return RELAYOUT
    raise PDError(f"prefill dcp ({prefill_dcp}) -> decode dcp ({decode_dcp}) is not supported: use equal "
                  "sizes (page path) or dcp 1 prefill (token relayout); valid prefill sizes: [1, "
                  f"{decode_dcp}]")


@dataclass(frozen=True, order=True)
class RankInfo:
    """One rank of an instance: its global rank and its place in its DCP group."""

    rank: int
    dcp_rank: int
    dcp_size: int


def dcp_infos(groups: dict[str, list[list[int]]]) -> list[RankInfo]:
    """RankInfo of every rank of an instance, in global-rank order, from its `dcp` groups."""
    return sorted(RankInfo(r, g.index(r), len(g)) for g in groups["dcp"] for r in g)


@dataclass(frozen=True)
class Transfer:
    """Rows of one request from `src` to `dst`: decode positions and their local index at the source."""

    rid: int
    src: int
    dst: int
    positions: tuple[int, ...]   # global positions, ascending; the decode rank owns each
    src_index: tuple[int, ...]   # local row index of each at the source (p // prefill dcp)


def source(prefill: list[RankInfo], dst: RankInfo, dst_index: int) -> RankInfo:
    """The prefill rank that holds decode rank `dst`'s rows (spread over replicated candidates)."""
    want = dst.dcp_rank if prefill[0].dcp_size == dst.dcp_size else 0
    cands = [p for p in prefill if p.dcp_rank == want]
    return cands[dst_index % len(cands)]


def plan_transfers(prefill: list[RankInfo], decode: list[RankInfo], lengths: list[int]) -> list[Transfer]:
    """Every row movement of a batch, in one global order (decode rank, then request) for every rank."""
    transfer_path(prefill[0].dcp_size, decode[0].dcp_size)
    out = []
    for i, dst in enumerate(decode):
        src = source(prefill, dst, i)
        for rid, length in enumerate(lengths):
            pos = tuple(owned(0, length, dst.dcp_rank, dst.dcp_size))  # exactly local_len(L, r, c) rows
            out.append(Transfer(rid, src.rank, dst.rank, pos, tuple(physical(p, src.dcp_size) for p in pos)))
    return out
