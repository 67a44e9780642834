"""The rank map as pure functions of a Topology (picotron style: read every group off a grid)."""
from __future__ import annotations

from dataclasses import dataclass

from dcpctl.plan.topology import Topology


@dataclass(frozen=True)
class RankInfo:
    rank: int
    node: int
    engine: int  # whole-engine replica (dp without --enable-dp-attention)
    pp_rank: int
    tp_rank: int
    attn_dp_rank: int  # attention-DP replica inside the TP group
    attn_tp_rank: int
    dcp_rank: int
    ep_rank: int

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def rank_info(t: Topology, rank: int) -> RankInfo:
    engine, local = divmod(rank, t.world)
    pp_rank, tp_rank = divmod(local, t.tp_size)
    attn_dp_rank, attn_tp_rank = divmod(tp_rank, t.attn_tp)
    return RankInfo(rank, rank // t.ranks_per_node, engine, pp_rank, tp_rank, attn_dp_rank, attn_tp_rank,
                    attn_tp_rank % t.dcp_size, tp_rank // max(t.tp_size // t.ep_size, 1))  # ep > tp: tp_ep


def _blocks(t: Topology, size: int) -> list[list[int]]:
    return [list(range(s, s + size)) for s in range(0, t.total_gpus, size)]


def build_groups(t: Topology) -> dict[str, list[list[int]]]:
    """Every group as a list of global-rank lists; each kind partitions all ranks."""
    replicas: list[list[int]] = []  # attention-DP replica i spans every pipeline stage of its engine
    for engine in range(t.engine_replicas):
        for i in range(t.attn_dp):
            replicas.append([engine * t.world + pp * t.tp_size + i * t.attn_tp + j
                             for pp in range(t.pp_size) for j in range(t.attn_tp)])
    moe_tp = t.tp_size // t.ep_size
    ep = [[tp0 + e * moe_tp + j for e in range(t.ep_size)]
          for tp0 in range(0, t.total_gpus, t.tp_size) for j in range(moe_tp)]
    return {
        "tp": _blocks(t, t.tp_size),
        "attn_tp": _blocks(t, t.attn_tp),
        "attn_dp": replicas,
        "dcp": _blocks(t, t.dcp_size),
        "ep": ep,
    }


def dcp_groups_crossing_nodes(t: Topology, groups: dict[str, list[list[int]]]) -> list[list[int]]:
    return [g for g in groups["dcp"] if len({r // t.ranks_per_node for r in g}) > 1]


def collapse(ranks: list[int]) -> str:
    """[0,1,2,3,8] -> '0-3,8' for readable tables."""
    parts: list[str] = []
    start = prev = None
    for r in ranks:
        if prev is not None and r == prev + 1:
            prev = r
            continue
        if start is not None:
            parts.append(f"{start}-{prev}" if prev != start else str(start))
        start = prev = r
    if start is not None:
        parts.append(f"{start}-{prev}" if prev != start else str(start))
    return ",".join(parts)
