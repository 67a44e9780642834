"""Multi-rank (gloo) model tests on the built-in tiny checkpoint, float64, reference attention.

TP / EP / attention-DP / replicated-Q runs must reproduce the single-rank logits within 1e-9.
"""
from __future__ import annotations

import pytest
import torch

from dcpctl.runtime.models import load_model
from dcpctl.runtime.parallel import ParallelState
from dcpctl.runtime.tiny import write_tiny_model
from tests.dist import run_ranks
from tests.runtime.configs import typed
from tests.runtime.ref_context import RefContext, greedy_run

PROMPTS = [[256, 72, 101, 108, 108, 111], [256, 1, 2, 3, 200, 9, 9, 9, 14], [256, 33]]
STEPS = 3


def make_groups(tp: int, dp: int = 1, dcp: int = 1, ep: int = 1) -> dict[str, list[list[int]]]:
    """Launch-config groups for one engine of tp ranks (same layout as dcpctl.plan.groups)."""
    attn_tp, moe_tp = tp // dp, tp // ep
    blocks = lambda n: [list(range(s, s + n)) for s in range(0, tp, n)]  # noqa: E731
    return {"tp": blocks(tp), "attn_tp": blocks(attn_tp), "attn_dp": blocks(attn_tp), "dcp": blocks(dcp),
            "ep": [[e * moe_tp + j for e in range(ep)] for j in range(moe_tp)]}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(write_tiny_model(tmp_path_factory.mktemp("tiny")))


@pytest.fixture(scope="module")
def single(tiny):
    model = load_model(tiny, ParallelState.single(), False, torch.float64)
    return ({i: greedy_run(model, [p], STEPS) for i, p in enumerate(PROMPTS)},
            greedy_run(model, PROMPTS, STEPS))


def _rank(rank: int, world: int, path: str, groups: dict, dp: int, prompts: list, decisions: dict):
    ps = ParallelState.build(groups, attn_dp_size=dp)
    model = load_model(path, ps, typed(decisions).dcp_replicate_q_proj, torch.float64)
    ctx = RefContext(model.cfg.kv_lora_rank, ps.dcp.rank, ps.dcp.size)
    return greedy_run(model, prompts[ps.attn_dp_index], STEPS, ctx)


def _assert_same(got, want) -> None:
    pre, dec, outs = got
    assert outs == want[2]
    for a, b in zip(pre + dec, want[0] + want[1]):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("tp,ep", [(2, 1), (4, 1), (4, 4), (4, 2)])
def test_tensor_and_expert_parallel_match_single_rank(tiny, single, tp, ep):
    results = run_ranks(_rank, tp, tiny, make_groups(tp, ep=ep), 1, [PROMPTS], {})
    for r in results:
        _assert_same(r, single[1])


def test_attention_dp_replicas_with_their_own_prompts(tiny, single):
    per_prompt, _ = single
    prompts = [[PROMPTS[0], PROMPTS[2]], [PROMPTS[1]]]  # replica 0: two prompts, replica 1: one
    results = run_ranks(_rank, 4, tiny, make_groups(4, dp=2), 2, prompts, {})
    for rank, (pre, dec, outs) in enumerate(results):
        mine = [0, 2] if rank < 2 else [1]
        for j, i in enumerate(mine):
            _assert_same(([pre[j]], [dec[j]], [outs[j]]), per_prompt[i])


def test_attention_dp_replica_with_no_tokens(tiny, single):
    per_prompt, _ = single
    results = run_ranks(_rank, 4, tiny, make_groups(4, dp=2), 2, [[], [PROMPTS[1]]], {})
    assert results[0][2] == [] and results[1][2] == []
    for pre, dec, outs in results[2:]:
        _assert_same((pre, dec, outs), per_prompt[1])


@pytest.mark.parametrize("dp", [1, 2])
def test_replicated_q_projection_matches(tiny, single, dp):
    # DCP 2 inside each attention-TP group; the reference context keeps full KV on every rank and
    # picks this rank's heads out of the group query
    per_prompt, both = single
    prompts = [PROMPTS] if dp == 1 else [[PROMPTS[0]], [PROMPTS[1]]]
    decisions = {"dcp_replicate_q_proj": True}
    results = run_ranks(_rank, 4, tiny, make_groups(4, dp=dp, dcp=2), dp, prompts, decisions)
    for rank, r in enumerate(results):
        _assert_same(r, both if dp == 1 else per_prompt[rank // 2])
