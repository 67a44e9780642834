"""What one engine step reports per request, and how replicas hand it to rank 0 as tensors.

    Event(rid, token, logprob, finish)     finish: "" while running, else "stop" | "length"
    ReplicaStats(waiting, running, free_pages, num_pages, retractions)   one attention-DP replica's scheduler
    gather_to_rank0(events, stats, group, world) -> (all events, [stats per global rank]) on rank 0

With attention DP each replica's first rank holds its own sampled tokens; gather_to_rank0 packs
events as int64 [N, 3] plus float64 [N] rows (no pickled objects), padded to the largest N.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:     # torch loads where events are packed, not in the HTTP workers that only read Event
    import torch

FINISH = ("", "stop", "length", "abort")


@dataclass(frozen=True)
class Event:
    rid: int
    token: int
    logprob: float
    finish: str = ""


@dataclass(frozen=True)
class ReplicaStats:
    waiting: int
    running: int
    free_pages: int
    num_pages: int
    retractions: int = 0      # requests the scheduler retracted so far (cumulative)


def _pack(events: list[Event], n: int) -> tuple[torch.Tensor, torch.Tensor]:
    # -> ints [n, 3] (rid, token, finish index), logprobs [n] float64; rows past len(events) stay 0
    import torch
    ints = torch.zeros(n, 3, dtype=torch.int64)
    lps = torch.zeros(n, dtype=torch.float64)
    for i, e in enumerate(events):
        ints[i] = torch.tensor([e.rid, e.token, FINISH.index(e.finish)])
        lps[i] = e.logprob
    return ints, lps


def gather_to_rank0(events: list[Event], stats: ReplicaStats, group: Any,
                    world: int) -> tuple[list[Event], list[ReplicaStats]]:
    """Every rank calls this; rank 0 gets every replica's events once and every rank's stats."""
    import torch
    import torch.distributed as dist

    from dcpctl.runtime.collectives import all_gather_rows
    group = group if group is not None else dist.group.WORLD     # None: the default group (the seam's None is
                                                                 # one rank)
    # head: [n_events, waiting, running, free_pages, num_pages, retractions]; only a replica's first rank
    # sends events
    head = torch.tensor([len(events), stats.waiting, stats.running, stats.free_pages, stats.num_pages,
                         stats.retractions], dtype=torch.int64)
    heads = all_gather_rows(head, group, world)
    n = max(int(h[0]) for h in heads)
    all_stats = [ReplicaStats(*(int(x) for x in h[1:])) for h in heads]
    if n == 0:
        return [], all_stats
    ints, lps = _pack(events, n)
    all_ints, all_lps = all_gather_rows(ints, group, world), all_gather_rows(lps, group, world)
    out = []
    for h, ri, rl in zip(heads, all_ints, all_lps):
        out += [Event(int(ri[i, 0]), int(ri[i, 1]), float(rl[i]), FINISH[int(ri[i, 2])])
                for i in range(int(h[0]))]
    return out, all_stats
