"""The performance model's work inventory on hand-checkable cases: expected distinct experts against
exhaustive counts, one MoE layer's bytes at a batch, the bytes read against the loader's weight bytes, the
collectives."""
from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

from dcpctl.plan.perf_comm import NCCL_H200_8, Call, band_s, call_band_s, step_calls
from dcpctl.plan.perf_work import decode_work, expected_distinct, layer_counts, local_len
from dcpctl.plan.topology import Topology
from dcpctl.plan.weights import weight_bytes
from tests.plan.helpers import hw, model

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
V31 = model("deepseek-v3.1")
TP8_DCP8 = Topology(tp_size=8, dcp_size=8, gpus_per_node=8)


def _choices(experts: int, groups: int, top_groups: int, k: int) -> list[frozenset[int]]:
    """Every (group set, expert set) a token may pick under group-limited top-k, each equally likely."""
    per = experts // groups
    out = []
    for gs in itertools.combinations(range(groups), top_groups):
        pool = [g * per + i for g in gs for i in range(per)]
        out += [frozenset(c) for c in itertools.combinations(pool, k)]
    return out


@pytest.mark.parametrize("experts,groups,top_groups,k,local",
                         [(8, 4, 2, 2, range(0, 2)), (8, 4, 2, 2, range(8)),
                          (12, 3, 1, 2, range(4, 10)), (6, 2, 1, 3, range(6))])
@pytest.mark.parametrize("tokens", [1, 2, 3])
def test_expected_distinct_experts_equals_an_exhaustive_count(experts, groups, top_groups, k, local, tokens):
    choices = _choices(experts, groups, top_groups, k)
    mine = set(local)
    total = sum(len(set().union(*picks) & mine) for picks in itertools.product(choices, repeat=tokens))
    exhaustive = total / len(choices) ** tokens
    assert expected_distinct(len(mine), experts, k, tokens) == pytest.approx(exhaustive, rel=1e-12)


def test_one_moe_layer_reads_the_seen_experts_slices():
    # V3.1 at TP 8 (no EP): each rank holds a 256-wide slice of all 256 experts: 3 * 7168 * 256 FP8 bytes plus
    # one fp32 scale per 128 x 128 block; 4 rows see 256 * (1 - (1 - 8/256)^4) experts
    w = decode_work(V31, TP8_DCP8, 8, False, True, 4, 8192)
    experts = [g for g in w.gemms if g.name.startswith("experts")]
    slice_bytes = 3 * 7168 * 256 * (1 + 4 / (128 * 128))
    seen = 256 * (1 - (1 - 8 / 256) ** 4)
    assert sum(g.bytes for g in experts) / 58 == pytest.approx(seen * slice_bytes, rel=1e-9)
    assert sum(g.flops for g in experts) / 58 == pytest.approx(2 * 4 * 8 * 3 * 7168 * 256, rel=1e-9)
    assert [g.count for g in experts] == [58, 58]          # 58 MoE layers, one grouped GEMM pair each


def test_a_saturated_step_reads_every_weight_but_the_embedding_and_the_mha_form_kv_b():
    w = decode_work(V31, TP8_DCP8, 8, False, True, 1 << 20, 8192)
    embed = math.ceil(129280 / 8) * 7168 * 2
    w_kv = 61 * 16 * 8 * (128 + 128) * 512 * 2                 # the DCP group's kv_b, bf16, MHA-form prefill
                                                               # only
    norms = 61 * (2 * 7168 + 512 + 1536) * 2 + 7168 * 2 + 58 * 256 * 4   # layer norms, final norm, noaux bias
    held = weight_bytes(V31, TP8_DCP8, False, True)
    assert w.weight_bytes + embed + w_kv + norms == pytest.approx(held, rel=1e-4)


def test_dcp_stripes_context_and_gathers_heads_replicated_q_reads_the_groups_q_b():
    one = decode_work(V31, Topology(tp_size=8), 1, False, True, 8, 100_003)
    eight = decode_work(V31, TP8_DCP8, 8, False, True, 8, 100_003)
    assert (one.attention.heads, eight.attention.heads) == (16, 128)
    assert eight.attention.local_context == local_len(100_003, 8) == 12_501
    rep = decode_work(V31, TP8_DCP8, 8, True, True, 8, 100_003)   # q_b and w_kc over the group's 128 heads
    assert rep.weight_bytes - eight.weight_bytes == pytest.approx(
        61 * (7 * 16 * 192 * 1536 * (1 + 4 / 16384) + 7 * 16 * 128 * 512 * 2), rel=1e-9)


def test_layer_counts():
    assert layer_counts(V31) == layer_counts(V31, 1) and (layer_counts(V31).dense,
                                                          layer_counts(V31).moe) == (3, 58)
    kl = layer_counts(model("kimi-linear-48b-a3b"))
    assert (kl.mla, kl.kda, kl.total) == (7, 20, 27)


def test_the_steps_collectives_as_the_runtime_makes_them():
    calls = step_calls(V31, TP8_DCP8, 8, "a2a", False, 32, layer_counts(V31))
    row = 32 * 7168 * 2
    assert calls == [Call("all_reduce", "attn_tp", 8, row, 1), Call("all_reduce", "attn_tp", 8, row, 61),
                     Call("all_gather", "dcp", 8, 32 * 16 * 576 * 2, 61),
                     Call("all_to_all", "dcp", 8, 8 * 32 * 16 * 514 * 2, 61),
                     Call("all_reduce", "tp", 8, row, 61),
                     Call("all_gather", "attn_tp", 8, 32 * 16160 * 2, 1)]
    rep = step_calls(V31, TP8_DCP8, 8, "a2a", True, 32, layer_counts(V31))
    assert [c.kind for c in rep if c.group == "dcp"] == ["all_to_all"]
    ag = step_calls(V31, TP8_DCP8, 8, "ag_rs", False, 32, layer_counts(V31))
    assert [(c.kind, c.bytes) for c in ag if c.group == "dcp"] == [
        ("all_gather", 32 * 16 * 576 * 2), ("all_gather", 32 * 128 * 4),
        ("reduce_scatter", 32 * 128 * 512 * 4)]
    dpa = Topology(tp_size=8, dp_size=2, enable_dp_attention=True, gpus_per_node=8)
    calls = step_calls(V31, dpa, 1, "none", False, 16, layer_counts(V31))
    assert (Call("all_gather", "tp", 8, 16 * 7168 * 2, 61) in calls
            and Call("all_reduce", "tp", 8, 2 * 16 * 7168 * 2, 61) in calls)


def test_the_collectives_band():
    h = hw("h200-8")
    size, us = NCCL_H200_8["all_reduce"][2]                     # 1 MiB at 8 ranks: the table's own time
    lo, hi = call_band_s(Call("all_reduce", "tp", 8, size, 1), h, 15e-6, 450e9, False)
    assert hi == pytest.approx(max(us * 1e-6, 15e-6 + 2 * 7 / 8 * size / 450e9), rel=1e-9) and lo <= hi
    inside = call_band_s(Call("all_reduce", "tp", 16, size, 1), h, 15e-6, 450e9, False)
    across = call_band_s(Call("all_reduce", "tp", 16, size, 1), h, 15e-6, 450e9, True)
    assert across[0] > inside[0] and across[1] > inside[1]      # a NIC between nodes, not NVLink
    calls = step_calls(V31, TP8_DCP8, 8, "a2a", False, 32, layer_counts(V31))
    lo, hi = band_s(calls, h, TP8_DCP8, 15e-6, 450e9)
    assert 0 < lo <= hi and band_s([], h, TP8_DCP8, 15e-6, 450e9) == (0.0, 0.0)


def test_the_modelled_collectives_are_those_a_bench_rank_run_recorded():
    # tests/fixtures/rank_tiny_tp4_dcp2_cpu.json: `dcpctl bench rank --device cpu --tp-size 4 --dcp-size 2
    # --batches 2 --contexts 64` (the rank branch at 9f54f86): the tiny model, ag_rs, a float32 wire
    from collections import Counter

    from dcpctl.plan.perf_measured import check_matches, read_measured
    from tests.plan.helpers import plan

    ms = read_measured(FIXTURES / "rank_tiny_tp4_dcp2_cpu.json")
    p = plan("tiny", hardware="cpu", tp_size=4, dcp_size=2)
    check_matches(ms, p.request, p.decisions)
    m, t = p.request.model, p.request.topology
    for cell in ms.doc["cells"]:
        mine: Counter = Counter()
        for c in step_calls(m, t, 2, p.decisions["dcp_comm_backend"].value, False, cell["batch"],
                            layer_counts(m)):
            mine[(c.kind, c.group, c.size, c.bytes)] += c.count
        theirs = Counter({(c["kind"], c["group"], c["group_size"], c["bytes"]): c["count"]
                          for c in cell["collectives"]})
        assert mine == theirs


def _experts(w):
    return [g for g in w.gemms if g.name.startswith("experts")]


def test_the_grouped_expert_gemms_programs_follow_the_runtimes_kernel_rule():
    # V3.1 at TP 8: expert slices gate+up [512, 7168], down [7168, 256]; 8 tokens x top-8 = 64 rows <= min(64,
    # 2 x 256): the few-rows kernel, one slot per row (up to the experts) x N / 16; 32 tokens: the MMA kernel,
    # every local expert x N / 64 (its programs exit when their expert has no rows)
    few = _experts(decode_work(V31, TP8_DCP8, 8, False, True, 8, 8192))
    assert [g.programs for g in few] == [64 * 512 / 16, 64 * 7168 / 16]
    mma = _experts(decode_work(V31, TP8_DCP8, 8, False, True, 32, 8192))
    assert [g.programs for g in mma] == [256 * 512 / 64, 256 * 7168 / 64]
    assert decode_work(V31, TP8_DCP8, 8, False, True, 32, 8192).programs == 58 * 256 * (512 + 7168) / 64
    w8a8 = _experts(decode_work(V31, TP8_DCP8, 8, False, True, 8, 8192, a16=False))   # no few-rows kernel
    assert [g.programs for g in w8a8] == [256 * 512 / 64, 256 * 7168 / 64]
    k2 = model("kimi-k2")   # TP 16: 384 experts of 128 columns; 8 tokens: 64 slots
    few = _experts(decode_work(k2, Topology(tp_size=16, dcp_size=8, gpus_per_node=8), 8, False, True, 8,
                               8192))
    assert [g.programs for g in few] == [64 * 256 / 16, 64 * 7168 / 16]
    # torch's grouped GEMM: not counted
    bf16 = _experts(decode_work(V31, TP8_DCP8, 8, False, False, 8, 8192))
    assert [g.programs for g in bf16] == [0.0, 0.0]


def test_a_cells_own_experts_replace_the_expectation():
    # bench rank's uniform routing is balanced: 32 tokens x top-8 read all 256 experts, where random routing
    # reads 256 * (1 - (1 - 8/256)^32) ~ 163 of them
    own = decode_work(V31, TP8_DCP8, 8, False, True, 32, 8192, experts=256.0)
    drawn = decode_work(V31, TP8_DCP8, 8, False, True, 32, 8192)
    slice_bytes = 3 * 7168 * 256 * (1 + 4 / (128 * 128))
    assert sum(g.bytes for g in _experts(own)) == pytest.approx(58 * 256 * slice_bytes, rel=1e-9)
    assert sum(g.bytes for g in _experts(drawn)) == pytest.approx(
        58 * 256 * (1 - (1 - 8 / 256) ** 32) * slice_bytes, rel=1e-9)
    assert sum(g.flops for g in _experts(own)) == pytest.approx(sum(g.flops for g in _experts(drawn)),
                                                                rel=1e-9)


def test_a_layer_subset_is_the_models_first_layers():
    from dcpctl.plan.perf_work import subset

    lay = layer_counts(subset(V31, 20, 1))
    assert (lay.total, lay.mla, lay.dense, lay.moe) == (20, 20, 1, 19)


def test_the_plans_kernel_rule_is_the_runtimes():
    pytest.importorskip("triton")
    from dcpctl.plan import perf_grid
    from dcpctl.runtime.kernels import fp8_tiles

    assert ((perf_grid.GROUPED_GEMV_ROWS, perf_grid.GROUPED_GEMV_PER_EXPERT, perf_grid.GEMV_BN,
             perf_grid.MMA_BN)
            == (fp8_tiles.GROUPED_GEMV_ROWS, fp8_tiles.GROUPED_GEMV_PER_EXPERT, fp8_tiles.DEFAULT_GEMV.bn,
                fp8_tiles.DEFAULT_TILES.bn))
    no_table = fp8_tiles.Fp8Tables()
    for local, pairs, a16 in [(256, 64, True), (256, 65, True), (16, 32, True), (16, 33, True),
                              (256, 8, False)]:
        kernel = fp8_tiles.choose_tiles(512, 7168, max(1, pairs // local), local, a16, pairs, tables=no_table)
        assert perf_grid.few_rows(local, pairs, a16) == isinstance(kernel,
                                                                   fp8_tiles.GemvTiles), (local, pairs)
