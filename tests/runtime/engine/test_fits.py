"""One "does this request fit" rule (runtime/fits.py): the scheduler, the server and `dcpctl generate`
accept exactly the same requests, speculative extra rows included (the server used to ignore them and
accept requests that the scheduler then refused)."""
import itertools

import pytest

from dcpctl.cli.generate import check_fits as generate_check
from dcpctl.plan.errors import UserError
from dcpctl.runtime.engine.request import SamplingParams, Sequence
from dcpctl.runtime.engine.scheduler import Scheduler, SchedulerError
from dcpctl.runtime.fits import misfit, room
from dcpctl.runtime.kv.allocator import VirtualAllocator
from dcpctl.runtime.server.gen import ServerState, check_fits as server_check
from dcpctl.runtime.server.protocol import ApiError

CAPACITY, PAGE, DCP = 8, 2, 2  # 16 virtual tokens


def _scheduler_ok(prompt: int, new: int, extra: int) -> bool:
    s = Scheduler(VirtualAllocator(CAPACITY, PAGE, DCP), chunk_size=0)
    try:
        s.add(Sequence(0, [1] * prompt, SamplingParams(max_new_tokens=new), kv_extra=extra))
    except SchedulerError:
        return False
    return True


def _server_ok(prompt: int, new: int, extra: int, positions: int = 1 << 20) -> bool:
    state = ServerState(None, None, "m", 10, positions, CAPACITY * DCP, None, kv_extra=extra)
    try:
        server_check(state, [1] * prompt, new)
    except ApiError:
        return False
    return True


def _generate_ok(prompt: int, new: int, extra: int, positions: int | None = None) -> bool:
    cfg = {"kv": {"capacity_tokens": CAPACITY}, "topology": {"dcp_size": DCP}}
    if extra:
        cfg["speculative"] = {"num_draft_tokens": extra}
    try:
        generate_check([[1] * prompt], new, cfg, 10, positions)
    except UserError:
        return False
    return True


@pytest.mark.parametrize("extra", [0, 1, 4])
def test_scheduler_server_and_generate_accept_the_same_requests(extra):
    virtual = CAPACITY * DCP
    for prompt, new in itertools.product(range(1, virtual + 2), range(1, virtual + 2)):
        want = prompt + new - 1 + extra <= virtual
        got = (_scheduler_ok(prompt, new, extra), _server_ok(prompt, new, extra),
               _generate_ok(prompt, new, extra))
        assert got == (want,) * 3, (prompt, new, extra, got)


def test_speculative_rows_are_counted_by_the_server():
    # 10 + 6 - 1 = 15 rows fit 16 plainly, but verification writes 4 more: the scheduler refuses, so must the
    # server
    assert _server_ok(10, 6, 0) and not _scheduler_ok(10, 6, 4) and not _server_ok(10, 6, 4)


def test_positions_limit_and_the_sentences():
    assert _server_ok(3, 5, 0, positions=8) and not _server_ok(3, 6, 0, positions=8)
    assert not _generate_ok(3, 6, 0, positions=8)
    assert misfit(3, 6, 16, 8).sentence() == ("prompt (3 tokens) + max_new_tokens (6) = 9 exceeds the "
                                              "model's max_position_embeddings (8)")
    assert misfit(10, 6, 16, None, 4).sentence("max_tokens") == (
        "prompt (10 tokens) + max_tokens (6) - 1 + num_draft_tokens (4) = 19 KV rows exceeds the KV capacity "
        "(16 virtual tokens)")
    assert misfit(10, 8, 16) is not None and misfit(10, 7, 16) is None


@pytest.mark.parametrize("prompt,extra,positions", [(3, 0, None), (3, 4, None), (3, 0, 8), (15, 2, None)])
def test_room_is_the_largest_request_that_fits(prompt, extra, positions):
    most = room(prompt, 16, positions, extra)
    assert (most < 1 or misfit(prompt, most, 16, positions, extra) is None)
    assert misfit(prompt, most + 1, 16, positions, extra) is not None
