"""Process groups of one rank, built from the launch config's rank lists (never re-derived)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

GROUP_KINDS = ("tp", "attn_tp", "attn_dp", "dcp", "ep")


@dataclass
class Axis:
    """One parallel axis as seen by this rank: its group (None when size 1 or single process)."""

    group: Any
    ranks: list[int]
    rank: int  # index of this rank inside `ranks`

    @property
    def size(self) -> int:
        return len(self.ranks)


@dataclass
class ParallelState:
    """Every group this rank belongs to. Single-process runs use `ParallelState.single()`."""

    rank: int
    world_size: int
    tp: Axis
    attn_tp: Axis
    attn_dp: Axis  # the attention-DP replica this rank serves (its ranks across pipeline stages)
    dcp: Axis
    ep: Axis
    attn_dp_index: int = 0  # which replica this rank belongs to
    attn_dp_size: int = 1   # number of attention-DP replicas in the TP group

    @staticmethod
    def single() -> "ParallelState":
        one = lambda: Axis(None, [0], 0)  # noqa: E731
        return ParallelState(0, 1, one(), one(), one(), one(), one())

    @staticmethod
    def build(groups: dict[str, list[list[int]]], attn_dp_size: int = 1) -> "ParallelState":
        """Create every subgroup on every rank (torch requires all ranks to call new_group for all groups)."""
        rank, world = dist.get_rank(), dist.get_world_size()
        axes: dict[str, Axis] = {}
        for kind in GROUP_KINDS:
            mine = None
            for ranks in groups[kind]:
                g = dist.new_group(ranks) if len(ranks) > 1 else None
                if rank in ranks:
                    mine = Axis(g, list(ranks), ranks.index(rank))
            if mine is None:
                raise RuntimeError(f"rank {rank} is in no {kind} group of the launch config")
            axes[kind] = mine
        attn_dp_index = axes["attn_tp"].ranks[0] % len(axes["tp"].ranks) // len(axes["attn_tp"].ranks)
        return ParallelState(rank, world, attn_dp_index=attn_dp_index, attn_dp_size=attn_dp_size, **axes)
