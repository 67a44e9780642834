"""A stand-in process group: one rank of a deployment run alone, every peer behaving as this rank.

Every rank of a TP/DCP/EP deployment runs the same operations on its own slice (docs/design.md section 9), so
one GPU measures a deployment's compute by running one rank at the real size with its collectives answered
here.  A peer identical to this rank holds this rank's tensors, so:

| collective     | this rank gets                                                 | device work              |
| -------------- | -------------------------------------------------------------- | ------------------------ |
| all-reduce     | the sum of `size` identical copies: x * size                   | one in-place multiply    |
| all-gather     | this rank's tensor in every slot                               | one copy (or one a slot) |
| reduce-scatter | `size` times its own block of the input                        | one multiply into out    |
| all-to-all     | from every peer, what that peer sends this rank: its own block | one copy                 |
| broadcast      | what it holds                                                  | none                     |

Values stay those of a real step (an attention merge of identical partials is the partial; a MoE router
sees real activations), and every answer is device work only, so a decode step captures in a CUDA graph.
`answers` repeats them on their own, so the bench can time them and subtract them from the step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor


@dataclass(frozen=True)
class StandinGroup:
    """The group `name` (tp, attn_tp, attn_dp, dcp, ep) of `size` ranks, as rank `rank` of it sees it."""

    name: str
    size: int
    rank: int

    def all_reduce(self, x: Tensor) -> Tensor:
        # x: [...] -> x * size, in place
        return x.mul_(self.size)

    def all_gather_list(self, outs: list[Tensor], x: Tensor) -> None:
        # x: [...] -> every outs[j] = x
        for o in outs:
            o.copy_(x)

    def all_gather_into(self, out: Tensor, inp: Tensor) -> None:
        # inp: [...] -> out: [size, *inp.shape], every block = inp
        out.view(self.size, -1).copy_(inp.reshape(1, -1).expand(self.size, -1))

    def reduce_scatter_into(self, out: Tensor, inp: Tensor) -> None:
        # inp: [size, *out.shape] -> out = size * inp[rank] (every peer contributes the same block)
        torch.mul(inp.reshape(self.size, -1)[self.rank], self.size, out=out.view(-1))

    def all_to_all_into(self, out: Tensor, inp: Tensor) -> None:
        # inp, out: [size * k] flat -> every block j of out = inp's block `rank` (peer j sends its block for
        # us)
        out.view(self.size, -1).copy_(inp.view(self.size, -1)[self.rank].expand(self.size, -1))


def standin_state(groups: dict[str, list[list[int]]], rank: int, attn_dp_size: int) -> Any:
    """The ParallelState of global rank `rank` of a launch config's groups, each group of more than one rank a
    StandinGroup (what ParallelState.build makes with torch.distributed, without any process group)."""
    from dcpctl.runtime.parallel import GROUP_KINDS, Axis, ParallelState
    axes: dict[str, Axis] = {}
    for kind in GROUP_KINDS:
        ranks = next((list(g) for g in groups[kind] if rank in g), None)
        if ranks is None:
            raise ValueError(f"rank {rank} is in no {kind} group of the launch config")
        me = ranks.index(rank)
        axes[kind] = Axis(StandinGroup(kind, len(ranks), me) if len(ranks) > 1 else None, ranks, me)
    world = sum(len(g) for g in groups["tp"])
    attn_dp_index = axes["attn_tp"].ranks[0] % len(axes["tp"].ranks) // len(axes["attn_tp"].ranks)
    return ParallelState(rank, world, attn_dp_index=attn_dp_index, attn_dp_size=attn_dp_size, **axes)


def answers(calls: list[Any], device: torch.device) -> list[Callable[[], Any]]:
    """Closures that repeat the stand-in answers of `calls` (collectives.Call, as a step recorded them) on
    fresh buffers of their inputs' shapes: what the bench times alone, to subtract them from a step."""
    return [w for c in calls if (w := _answer(c, device)) is not None]


def _answer(call: Any, device: torch.device) -> Callable[[], Any] | None:
    kind, shape, dtype = call.kind, call.shape, getattr(torch, call.dtype)
    group = StandinGroup(call.group, call.size, 0)
    inp = torch.zeros(shape, dtype=dtype, device=device)
    if kind == "all_reduce":
        return lambda: group.all_reduce(inp)
    if kind == "all_gather" and call.form == "list":
        outs = [torch.empty_like(inp) for _ in range(group.size)]
        return lambda: group.all_gather_list(outs, inp)
    if kind == "all_gather":
        out = torch.empty((group.size, *shape), dtype=dtype, device=device)
        return lambda: group.all_gather_into(out, inp)
    if kind == "reduce_scatter":
        out = torch.empty(shape[1:], dtype=dtype, device=device)
        return lambda: group.reduce_scatter_into(out, inp)
    if kind == "all_to_all":
        out = torch.empty_like(inp)
        return lambda: group.all_to_all_into(out, inp)
    return None     # broadcast: no device work
