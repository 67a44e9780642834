"""Every collective of a step goes through here: torch.distributed over a real group, or a stand-in group.

    all_reduce(x, group) -> x                       summed in place over the group
    all_gather_rows(x, group, size) -> [x_0, ...]   one tensor per group rank, in group-rank order
    gather_sizes(n, group, size, device) -> [n_0, ...]
    all_gather_into(out, inp, group)                out: [size, *inp.shape] contiguous, block j = rank j's inp
    reduce_scatter_into(out, inp, group)            inp: [size, *out.shape] contiguous, block j goes to rank j
    all_to_all_into(out, inp, group)                equal blocks along dim 0 (byte views pass through)
    broadcast(t, src, group)                        in place, from global rank src

A group of None is a group of one: every call is then the identity, with no call made.  A
`standin.StandinGroup` answers the call on this rank alone, as a group whose every peer behaves as this
rank would (dcpctl bench rank: one GPU runs one rank of a deployment; runtime/standin.py); any other group
goes straight to torch.distributed, as before the seam.

`recording(names)` lists every call of a block of code on either path as a `Call` (kind, group name,
group size, input shape and dtype, bytes: the input this rank contributes), so that tests can compare an
emulated rank's collectives with a real one's and the bench can report a step's.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch import Tensor

from dcpctl.runtime.standin import StandinGroup

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")


@dataclass(frozen=True)
class Call:
    """One collective as this rank made it."""

    kind: str            # one of KINDS
    group: str           # the parallel axis: tp, attn_tp, attn_dp, dcp, ep (or what `names` calls it)
    size: int            # ranks in the group
    shape: tuple[int, ...]   # this rank's input
    dtype: str
    nbytes: int          # this rank's input: what it sends or contributes
    form: str = ""       # "list": all_gather_rows' one output tensor per rank (a copy each on a stand-in)


class _Recorder:
    def __init__(self, names: dict[int, str], captured_only: bool) -> None:
        self.names, self.captured_only, self.calls = names, captured_only, []

    def note(self, kind: str, group: Any, x: Tensor, size: int, form: str) -> None:
        if self.captured_only and not torch.cuda.is_current_stream_capturing():
            return
        name = group.name if isinstance(group, StandinGroup) else self.names.get(id(group), "other")
        self.calls.append(Call(kind, name, size, tuple(x.shape), str(x.dtype).removeprefix("torch."),
                               x.numel() * x.element_size(), form))


_recorder: _Recorder | None = None


@contextmanager
def recording(names: dict[int, str] | None = None, captured_only: bool = False) -> Iterator[list[Call]]:
    """The calls made inside the block, in order.  names: id(process group) -> axis name (real groups; a
    stand-in group knows its own).  captured_only: only calls made while a CUDA graph is being captured (what
    every replay of that graph repeats; a capture's warm-up run is left out)."""
    global _recorder
    if _recorder is not None:
        raise RuntimeError("collectives.recording is already on")
    _recorder = _Recorder(names or {}, captured_only)
    try:
        yield _recorder.calls
    finally:
        _recorder = None


def axis_names(ps: Any) -> dict[int, str]:
    """id(group) -> axis name for every group of a ParallelState (the `names` of `recording`)."""
    from dcpctl.runtime.parallel import GROUP_KINDS
    return {id(getattr(ps, k).group): k for k in reversed(GROUP_KINDS) if getattr(ps, k).group is not None}


def _note(kind: str, group: Any, x: Tensor, size: int, form: str = "") -> None:
    if _recorder is not None:
        _recorder.note(kind, group, x, size, form)


def _size(group: Any) -> int:
    return group.size if isinstance(group, StandinGroup) else dist.get_world_size(group)


def all_reduce(x: Tensor, group: Any) -> Tensor:
    # x: [...] summed in place over `group`; every rank of a group passes the same shape
    if group is None or x.numel() == 0:
        return x
    _note("all_reduce", group, x, _size(group))
    if isinstance(group, StandinGroup):
        return group.all_reduce(x)
    dist.all_reduce(x, group=group)
    return x


def all_gather_rows(x: Tensor, group: Any, size: int) -> list[Tensor]:
    # x: [N, ...] same shape on every rank -> `size` tensors [N, ...] in group-rank order
    if group is None:
        return [x]
    out = [torch.empty_like(x) for _ in range(size)]
    _note("all_gather", group, x, size, "list")
    if isinstance(group, StandinGroup):
        group.all_gather_list(out, x)
    else:
        dist.all_gather(out, x.contiguous(), group=group)
    return out


def gather_sizes(n: int, group: Any, size: int, device: torch.device | str = "cpu") -> list[int]:
    """Every group rank's integer n, in group-rank order."""
    if group is None:
        return [n]
    parts = all_gather_rows(torch.tensor([n], dtype=torch.int64, device=device), group, size)
    return torch.cat(parts).tolist()     # one copy to the host, not one per rank


def all_gather_into(out: Tensor, inp: Tensor, group: Any) -> None:
    # inp: [...] -> out: [size, *inp.shape] contiguous
    _blocks("all_gather", out, inp, group, out.shape[0], ("all_gather_single", "all_gather_into_tensor"))


def reduce_scatter_into(out: Tensor, inp: Tensor, group: Any) -> None:
    # inp: [size, *out.shape] contiguous (block j goes to rank j), summed over ranks -> out
    _blocks("reduce_scatter", out, inp, group, inp.shape[0],
            ("reduce_scatter_single", "reduce_scatter_tensor"))


def _blocks(kind: str, out: Tensor, inp: Tensor, group: Any, size: int, names: tuple[str, str]) -> None:
    # names: torch.distributed's name of the flat collective, then its name in older torch
    if group is None:
        out.view(-1).copy_(inp.reshape(-1))
        return
    _note(kind, group, inp, size)
    if isinstance(group, StandinGroup):
        getattr(group, kind + "_into")(out, inp)
        return
    new, older = names      # flat views keep gloo's shape checks happy
    getattr(dist, new if hasattr(dist, new) else older)(out.view(-1), inp.contiguous().view(-1), group=group)


def all_to_all_into(out: Tensor, inp: Tensor, group: Any) -> None:
    # inp, out: [size * k] (flat, any dtype): block j of inp goes to rank j, block j of out came from rank j
    if group is None:
        out.copy_(inp)
        return
    size = _size(group)
    _note("all_to_all", group, inp, size)
    if isinstance(group, StandinGroup):
        group.all_to_all_into(out, inp)
    else:
        dist.all_to_all_single(out, inp, group=group)


def broadcast(t: Tensor, src: int, group: Any) -> Tensor:
    # t: [...] overwritten in place with global rank src's
    if group is None:
        return t
    _note("broadcast", group, t, _size(group))
    if not isinstance(group, StandinGroup):   # a stand-in's peers all hold this rank's t already
        dist.broadcast(t, src=src, group=group)
    return t
