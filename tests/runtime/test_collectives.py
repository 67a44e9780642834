"""The collectives seam: a stand-in group answers as a real gloo group whose every rank holds this rank's
tensors, every call is recorded the same on both paths, and the stand-in's answers replay on their own."""
from __future__ import annotations

import pytest
import torch

from dcpctl.runtime import collectives as C
from dcpctl.runtime.parallel import ParallelState
from dcpctl.runtime.standin import StandinGroup, answers, standin_state
from tests.dist import run_ranks

GROUPS = {"tp": [[0, 1, 2, 3]], "attn_tp": [[0, 1, 2, 3]], "attn_dp": [[0, 1, 2, 3]], "dcp": [[0, 1], [2, 3]],
          "ep": [[0, 1, 2, 3]]}


def _inputs(me: int) -> dict[str, torch.Tensor]:
    # what rank `me` holds; every rank of the real run holds the same (they all behave as rank `me`)
    g = torch.Generator().manual_seed(7 + me)
    return {"x": torch.randn(3, 5, generator=g), "rs": torch.randn(2, 3, 4, generator=g),
            "a2a": torch.randn(2, 6, generator=g), "b": torch.randn(4, generator=g)}


def _answers(ps: ParallelState, me: int) -> tuple[dict[str, torch.Tensor], list[C.Call]]:
    t = _inputs(me)
    with C.recording(C.axis_names(ps)) as calls:
        out = {"all_reduce": C.all_reduce(t["x"].clone(), ps.tp.group),
               "rows": torch.stack(C.all_gather_rows(t["x"], ps.tp.group, ps.tp.size))}
        out["into"] = torch.empty(2, 3, 5)
        C.all_gather_into(out["into"], t["x"], ps.dcp.group)
        out["rs"] = torch.empty(3, 4)
        C.reduce_scatter_into(out["rs"], t["rs"], ps.dcp.group)
        out["a2a"] = torch.empty(12)
        C.all_to_all_into(out["a2a"], t["a2a"].view(-1), ps.dcp.group)
        out["b"] = C.broadcast(t["b"].clone(), ps.dcp.ranks[0], ps.dcp.group)
        out["sizes"] = torch.tensor(C.gather_sizes(5, ps.tp.group, ps.tp.size))
    return out, calls


def _real(rank: int, world: int, me: int) -> tuple[dict[str, torch.Tensor], list[C.Call]]:
    return _answers(ParallelState.build(GROUPS), me)


@pytest.mark.parametrize("me", [0, 3])
def test_a_standin_answers_as_real_peers_that_hold_this_ranks_tensors(me):
    real = run_ranks(_real, 4, me)[me]
    emulated = _answers(standin_state(GROUPS, me, 1), me)
    assert real[1] == emulated[1]                         # the same calls: kind, group, size, shape, bytes
    for k, v in real[0].items():
        torch.testing.assert_close(emulated[0][k], v, msg=k)


def test_calls_name_their_axis_and_bytes():
    _, calls = _answers(standin_state(GROUPS, 2, 1), 2)
    assert [(c.kind, c.group, c.size, c.nbytes) for c in calls] == [
        ("all_reduce", "tp", 4, 60), ("all_gather", "tp", 4, 60), ("all_gather", "dcp", 2, 60),
        ("reduce_scatter", "dcp", 2, 96), ("all_to_all", "dcp", 2, 48), ("broadcast", "dcp", 2, 16),
        ("all_gather", "tp", 4, 8)]


def test_a_group_of_one_is_the_identity_and_no_call():
    x = torch.arange(4.0)
    with C.recording() as calls:
        assert C.all_reduce(x, None) is x and C.all_gather_rows(x, None, 1)[0] is x
        out = torch.empty(1, 4)
        C.all_gather_into(out, x, None)
    assert calls == [] and torch.equal(out[0], x)


def test_recording_does_not_nest():
    with C.recording():
        with pytest.raises(RuntimeError, match="already on"):
            with C.recording():
                pass


def test_standin_state_mirrors_the_real_groups():
    ps = standin_state(GROUPS, 3, 1)
    assert ps.dcp.ranks == [2, 3] and ps.dcp.rank == 1 and ps.dcp.group == StandinGroup("dcp", 2, 1)
    assert ps.tp.group.size == 4 and ps.world_size == 4


def test_answers_repeat_every_call_with_device_work():
    _, calls = _answers(standin_state(GROUPS, 0, 1), 0)
    work = answers(calls, torch.device("cpu"))
    assert len(work) == len(calls) - 1        # the broadcast has none
    for w in work:
        w()
