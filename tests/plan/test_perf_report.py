"""The performance section: its shape and labels, the terms' fit, and `--measured` files (used, or
refused)."""
from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from dcpctl.plan import perf_terms
from dcpctl.plan.errors import UserError
from dcpctl.plan.perf_measured import read_measured
from dcpctl.plan.perf_report import Workload, performance
from dcpctl.plan.perf_terms import NAMES, assumed, fit, predict, solve_relative
from tests.plan.helpers import hw, plan

LABELS = {"measured", "calibrated", "derived", "assumed", "modelled"}
FIGURES = ("max_concurrency", "decode_compute_ms", "communication_ms", "host_gap_ms", "tpot_ms", "ttft_ms",
           "output_tok_s_per_gpu")


def v31(**kw):
    return plan("deepseek-v3.1", tp_size=8, dcp_size=8, **kw)


def rank_doc(**plan_over) -> dict:
    """A `dcpctl bench rank` document of V3.1 TP 8 + DCP 8 on an H200 (RANK_SCHEMA's fields; values made
    up)."""
    p = {"model": "deepseek-v3.1", "architectures": ["DeepseekV3ForCausalLM"], "weights_dtype": "fp8",
         "tp_size": 8, "dcp_size": 8, "ep_size": 1, "attn_dp_size": 1, "attn_tp_size": 8,
         "kv_cache_dtype": "bf16", "dcp_comm_backend": "a2a", "dcp_replicate_q_proj": False,
         "hardware": "h200-8", "rank": 0, "num_layers": 61, "layers_run": 61, "dense_layers_run": 3,
         "moe_layers_run": 58, "page_size": 64, "attention_backend": "triton", **plan_over}
    cells = [{"batch": b, "context": L, "routing": "uniform", "step_us": 0.0, "standin_us": 0.0,
              "compute_us": 1000.0 * (10 + b / 4 + L / 8192),
              "compute_us_full": 1000.0 * (10 + b / 4 + L / 8192),
              "reps": 5, "spread": 0.01, "collectives": []} for b in (1, 8, 32) for L in (8192, 32768)]
    return {"kind": "dcpctl.bench.rank", "version": 1, "command": "dcpctl bench rank ...", "commit": None,
            "created": "2025-01-01T00:00:00",
            "device": {"name": "NVIDIA H200", "memory_bytes": 150 << 30, "sm": 90}, "plan": p,
            "weights": {"loaded_bytes": 1, "plan_bytes": 1, "loaded_bytes_full": None, "plan_bytes_full": 1},
            "memory": {}, "host_gap_us": 80.0, "cells": cells}


def write(tmp_path, doc) -> str:
    f = tmp_path / "rank.json"
    f.write_text(json.dumps(doc))
    return str(f)


def test_shape_and_labels():
    d = performance(v31(), Workload(4096, 1024, 32))
    assert [c["choice"] for c in d["columns"]] == ["dcp 1", "dcp 8 a2a"]
    assert d["workload"] == {"input_len": 4096, "output_len": 1024, "concurrency": 32, "decode_context": 4608,
                             "max_context": 5120, "chunked_prefill_size": 8192}
    for c in d["columns"]:
        for name in FIGURES:
            f = c[name]
            assert f["label"] in LABELS and f["source"] and f["value"] >= 0
            if "low" in f:
                assert f["low"] <= f["value"] <= f["high"]
        assert c["communication_ms"]["label"] == "modelled" and c["tpot_ms"]["label"] == "derived"
        assert c["tpot_ms"]["low"] == pytest.approx(c["decode_compute_ms"]["value"]
                                                    + c["communication_ms"]["low"]
                                                    + c["host_gap_ms"]["value"], rel=1e-3)
    assert d["columns"][1]["max_concurrency"]["value"] > 7 * d["columns"][0]["max_concurrency"]["value"]


def test_calibrated_on_a_gpu_with_a_perf_table_assumed_elsewhere():
    h200 = performance(v31(), Workload())
    assert h200["decode_terms"]["label"] == "calibrated" and "perf table" in h200["decode_terms"]["source"]
    b200 = performance(plan("deepseek-v3.1", hardware="b200-8", tp_size=8, dcp_size=8), Workload())
    assert b200["decode_terms"]["label"] == "assumed" and "aiconfigurator" in b200["decode_terms"]["source"]
    assert {c["decode_compute_ms"]["label"] for c in b200["columns"]} == {"assumed"}


def test_a_dcp1_plan_has_one_column_and_the_concurrency_is_capped_by_kv():
    d = performance(plan("deepseek-v3.1", tp_size=8), Workload(100_000, 1000, 64))
    (c,) = d["columns"]
    assert c["choice"] == "dcp 1" and c["concurrency"] == c["max_concurrency"]["value"] < 64


def test_no_section_for_invalid_plans_and_none_for_vllm():
    assert performance(plan("deepseek-v3.1", tp_size=8, dp_size=4, enable_dp_attention=True, dcp_size=4),
                       Workload()) is None
    d = performance(plan("deepseek-v3.1", tp_size=8, dcp_size=8, engine="vllm"), Workload())
    assert "unavailable" in d and "columns" not in d


def test_fit_recovers_the_terms_that_made_the_cells(monkeypatch):
    prior = assumed(hw("h200-8"))
    assert prior.prog_s == 0.0     # the assumed rule has no time per program: a term of prior 0, pulled
                                   # nowhere
    truth = prior.with_values([4e-13, 3.5e-13, 2e-15, 1.5e-15, 5e-6, 3e-9, 2e-6, 1.1, 8e-6], "x", "x")
    rng = random.Random(0)      # independent features, each term about 1 ms of a cell
    xs = [[rng.uniform(0.5, 2) * 1e-3 / t if i < 8 else rng.uniform(0, 2)
           for i, t in enumerate(truth.values())]
          for _ in range(40)]
    rows = [(x, predict(truth, x)) for x in xs]
    got = fit(rows, prior, "test")
    assert got.label == "calibrated" and got.source == "test"
    off = [abs(predict(got, x) / y - 1) for x, y in rows]     # the pull toward the prior costs the cells
                                                              # little
    assert sum(off) / len(off) < 0.02
    untold = [([*x[:5], 0.0, *x[6:]], y) for x, y in rows]    # no cell launches a program: the term stays at
                                                              # 0
    assert fit(untold, prior, "test").prog_s == 0.0
    monkeypatch.setattr(perf_terms, "PULL", 0.0)
    exact = fit(rows, prior, "test")
    for name in NAMES:
        assert getattr(exact, name) == pytest.approx(getattr(truth, name), rel=1e-6), name
    # held at zero, not below
    assert min(solve_relative([([1.0, 1.0], 1.0), ([1.0, 2.0], 0.5)], [1.0, 1.0])) >= 0


def test_measured_cells_replace_the_compute_and_calibrate_the_rest(tmp_path):
    ms = read_measured(write(tmp_path, rank_doc()))
    d = performance(v31(), Workload(8192 - 512, 1024, 8), ms)       # decode context 8,192, batch 8: a cell
    mine = d["columns"][1]
    assert mine["decode_compute_ms"] == {"value": 10 + 8 / 4 + 1, "label": "measured",
                                         "source": f"{ms.path}, cell batch 8 x context 8,192"}
    assert mine["host_gap_ms"]["value"] == 0.08 and mine["host_gap_ms"]["label"] == "measured"
    off = d["columns"][0]["decode_compute_ms"]
    assert off["label"] == "calibrated" and off["source"].startswith(f"fitted on {ms.path}'s 6 cells")
    other = performance(v31(), Workload(4096, 1024, 32), ms)["columns"][1]["decode_compute_ms"]
    assert other["label"] == "calibrated"


@pytest.mark.parametrize("change,words", [
    (lambda d: d.update(kind="other"), "is not a `dcpctl bench rank` file of version 1"),
    (lambda d: d.pop("cells"), "lacks cells"),
    (lambda d: d["plan"].pop("tp_size"), "lacks plan.tp_size"),
    (lambda d: d["plan"].update(tp_size=16), "was measured for tp_size 16, but the plan has 8"),
    (lambda d: d["plan"].update(dcp_replicate_q_proj=True), "was measured for dcp_replicate_q_proj True"),
    (lambda d: d["plan"].update(kv_cache_dtype="fp8_e4m3"), "was measured for kv_cache_dtype 'fp8_e4m3'"),
    (lambda d: d["device"].update(name="NVIDIA H100 80GB HBM3"),
     "was measured on NVIDIA H100 80GB HBM3, but"),
])
def test_a_file_for_another_deployment_is_refused_in_one_sentence(tmp_path, change, words):
    doc = rank_doc()
    change(doc)
    with pytest.raises(UserError) as e:
        performance(v31(), Workload(), read_measured(write(tmp_path, doc)))
    assert words in str(e.value) and str(e.value).count(". ") == 0


def test_a_measured_dcp1_file_matches_a_dcp1_plan(tmp_path):
    doc = rank_doc(dcp_size=1, dcp_comm_backend="ag_rs", dcp_replicate_q_proj=False)
    d = performance(replace(plan("deepseek-v3.1", tp_size=8)), Workload(8192 - 512, 1024, 8),
                    read_measured(write(tmp_path, doc)))
    assert d["columns"][0]["decode_compute_ms"]["label"] == "measured"


def test_prefill_chunks_their_flops_and_the_dcp_exchange():
    from dcpctl.plan.perf_prefill import chunk_calls, chunk_work, chunks
    from dcpctl.plan.perf_work import layer_counts
    assert chunks(20_000, 8192) == [(0, 8192), (8192, 8192), (16384, 3616)] and chunks(5, -1) == [(0, 5)]
    p8, p1 = v31(), plan("deepseek-v3.1", tp_size=8)
    m, t8, t1 = p8.request.model, p8.request.topology, p1.request.topology
    a, b = chunk_work(m, t1, 1, True, 8192, 8192), chunk_work(m, t8, 8, True, 8192, 8192)
    # 8192 queries x (8192 cached + 4096.5 causal) keys x 16 heads x (128 + 64 + 128) x 2, per MLA layer
    assert a.attn_flops == pytest.approx(2 * 8192 * (8192 + 4096.5) * 16 * 320 * 61)
    assert b.attn_flops == pytest.approx(a.attn_flops)      # DCP: 8x the heads over 1/8 of the keys
    assert b.gemm_flops == pytest.approx(a.gemm_flops)      # each rank up-projects its stripe for 8x the
                                                            # heads
    assert a.fp8_bytes > 0 and a.fp8_flops > 0
    dcp = {c.kind for c in chunk_calls(m, t8, 8, 8192, layer_counts(m)) if c.group == "dcp"}
    assert dcp == {"all_gather", "all_to_all"} and not [c
                                                        for c in chunk_calls(m, t1, 1, 8192, layer_counts(m))
                                                        if c.group == "dcp"]
    d = performance(p8, Workload(16_384, 64, 1))
    off, mine = (c["ttft_ms"] for c in d["columns"])
    assert off["value"] < mine["value"] and "2 chunk(s)" in mine["source"]


def test_the_chunked_prefill_size_passed_through():
    for args, size in (((("--chunked-prefill-size", "4096"),), 4096),
                       ((("--chunked-prefill-size=2048",),), 2048), ((("--chunked-prefill-size", "-1"),), -1),
                       ((), 8192)):
        assert replace(v31().request, engine_args=args).chunked_prefill_size == size


def test_a_cell_is_fitted_as_it_ran(tmp_path):
    from dcpctl.plan.perf_work import Ran

    doc = rank_doc(layers_run=20, dense_layers_run=1, moe_layers_run=19)
    doc["cells"][0].update(compute_us=4000.0, compute_us_full=12000.0, experts_active=8.0,
                           attention_backend="flashmla")
    doc["cells"][1].update(attention_backend="flashmla,triton")       # not one kernel's name: the runtime's
                                                                      # rule
    ms = read_measured(write(tmp_path, doc))
    assert ms.subset and ms.ran(doc["cells"][0]) == Ran(20, 1, 8.0, "flashmla")
    assert ms.ran(doc["cells"][0], own_experts=False) == Ran(20, 1, None, "flashmla")
    assert ms.ran(doc["cells"][1]) == Ran(20, 1, None, None)
    assert ms.ran_s(doc["cells"][0]) == pytest.approx(4e-3)      # the layers run, not the scaled figure
    whole = read_measured(write(tmp_path, rank_doc()))
    cell = whole.doc["cells"][0]
    assert not whole.subset and whole.ran(cell) == Ran()      # no kernel recorded: the runtime's rule
    assert whole.ran_s(cell) == pytest.approx(cell["compute_us_full"] * 1e-6)
    seen = []
    ms.calibrate(assumed(hw("h200-8")), lambda b, L, ran: seen.append(ran) or [1.0] * len(NAMES))
    assert seen[0] == Ran(20, 1, 8.0, "flashmla") and len(seen) == 6
