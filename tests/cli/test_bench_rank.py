"""`dcpctl bench rank` on the CPU: the measured file has the agreed shape (kind dcpctl.bench.rank, version 1),
and what launch refuses (or the bench cannot run) fails first with one sentence and exit 2."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dcpctl.cli.main import cli

TINY = ["--device", "cpu", "--tp-size", "4", "--dcp-size", "2", "--batches", "2", "--contexts", "24",
        "--reps", "3"]
# the measured file's required keys and their types (the contract with `dcpctl plan --measured`)
SCHEMA = {
    "": {"kind": str, "version": int, "command": str, "commit": (str, type(None)), "created": str,
         "device": dict, "plan": dict, "weights": dict, "memory": dict, "host_gap_us": float, "cells": list},
    "device": {"name": str, "memory_bytes": int, "sm": int},
    "plan": {"model": str, "architectures": list, "weights_dtype": str, "tp_size": int, "dcp_size": int,
             "ep_size": int, "attn_dp_size": int, "attn_tp_size": int, "kv_cache_dtype": str,
             "dcp_comm_backend": str, "dcp_replicate_q_proj": bool, "hardware": str, "rank": int,
             "num_layers": int, "layers_run": int, "dense_layers_run": int, "moe_layers_run": int,
             "page_size": int, "attention_backend": str},
    "weights": {"loaded_bytes": int, "plan_bytes": int, "loaded_bytes_full": (int, type(None)),
                "plan_bytes_full": int},
    "memory": {"max_concurrency": int, "context": int, "peak_bytes": int, "plan_budget_bytes": int,
               "fits": bool},
    "cell": {"batch": int, "context": int, "routing": str, "step_us": float, "standin_us": float,
             "compute_us": float, "compute_us_full": float, "reps": int, "spread": float,
             "collectives": list},
    "collective": {"kind": str, "group": str, "group_size": int, "bytes": int, "count": int},
}


def run(*args):
    return CliRunner().invoke(cli, ["bench", "rank", *map(str, args)], catch_exceptions=False)


def _check(obj: dict, part: str) -> None:
    for key, kind in SCHEMA[part].items():
        assert key in obj and isinstance(obj[key], kind), (part, key, obj.get(key))


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    out = tmp_path_factory.mktemp("rank") / "rank.json"
    r = run(*TINY, "--out", out)
    assert r.exit_code == 0, r.output
    return json.loads(out.read_text()), r.output


def test_the_measured_file_has_the_agreed_shape(measured):
    doc, _ = measured
    assert doc["kind"] == "dcpctl.bench.rank" and doc["version"] == 1
    for part in ("", "device", "plan", "weights", "memory"):
        _check(doc[part] if part else doc, part)
    assert ([(c["batch"], c["context"], c["routing"]) for c in doc["cells"]]
            == [(2, 24, "uniform"), (2, 24, "busiest")])
    for cell in doc["cells"]:
        _check(cell, "cell")
        for c in cell["collectives"]:
            _check(c, "collective")
    assert doc["command"].startswith("dcpctl bench rank --tp-size 4 --dcp-size 2 --device cpu")


def test_the_emulated_plan_and_its_weights(measured):
    doc, output = measured
    p, w = doc["plan"], doc["weights"]
    assert (p["tp_size"], p["dcp_size"], p["attn_tp_size"], p["rank"], p["layers_run"]) == (4, 2, 4, 0, 4)
    assert abs(w["loaded_bytes"] - w["plan_bytes"]) <= 0.01 * w["plan_bytes"]
    kinds = {(c["kind"], c["group"], c["group_size"]) for c in doc["cells"][0]["collectives"]}
    assert {("all_reduce", "attn_tp", 4), ("all_reduce", "tp", 4), ("all_gather", "dcp", 2)} <= kinds
    assert "rank 0 of tiny: tp 4, dcp 2" in output


def test_layers_scale_the_compute_and_the_bytes(tmp_path):
    out = tmp_path / "r.json"
    r = run(*TINY, "--layers", "2", "--routing", "uniform", "--out", out)
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    p, w, cell = doc["plan"], doc["weights"], doc["cells"][0]
    assert (p["layers_run"], p["num_layers"], p["dense_layers_run"], p["moe_layers_run"]) == (2, 4, 0, 2)
    # no dense layer was run
    assert w["plan_bytes"] < w["plan_bytes_full"] and w["loaded_bytes_full"] is None
    base = doc["base_us"]["2"]
    assert cell["compute_us_full"] == pytest.approx(base + (cell["compute_us"] - base) * 2, abs=0.02)
    assert "scaled to 4 layers" in r.output


def test_layers_of_both_kinds_scale_the_loaded_bytes_to_the_plans(tmp_path):
    out = tmp_path / "r.json"
    r = run(*TINY, "--layers", "3", "--routing", "uniform", "--out", out)
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert (doc["plan"]["dense_layers_run"], doc["plan"]["moe_layers_run"]) == (1, 2) and "partial" not in doc
    w = doc["weights"]
    assert abs(w["loaded_bytes_full"] - w["plan_bytes_full"]) <= 0.01 * w["plan_bytes_full"]


@pytest.mark.parametrize("args,message", [
    (["--tp-size", "4", "--dcp-size", "3"], "the plan is invalid: "),
    (["--tp-size", "2", "--rank", "2"], "--rank 2 is not a rank of this plan"),
    (["--layers", "9"], "--layers 9 must be between 1 and the model's 4 layers"),
    (["--model-preset", "deepseek-v3.1", "--tp-size", "8", "--hardware", "h200-8"],
     "the plan is for h200-8 (NVIDIA H200) but this run is on the CPU"),
    (["--weights", "checkpoint"], "--weights checkpoint reads --model-path DIR"),
    (["--batches", "0"], "--batches needs positive integers"),
    (["--disaggregation-mode", "decode"], "drop --disaggregation-mode"),
    (["--pp-size", "2", "--tp-size", "2"], "the bundled runtime has no pipeline parallelism"),
])
def test_refusals_are_one_sentence_and_exit_2(args, message):
    r = run("--device", "cpu", "--contexts", "64", *args)
    assert r.exit_code == 2, r.output
    assert message in r.output and len(r.output.strip().splitlines()) <= 3, r.output
    assert "Traceback" not in r.output


def test_a_hybrid_model_is_refused(tmp_path):
    from dcpctl.runtime.tiny_kimi import write_tiny_kimi_model
    r = run("--device", "cpu", "--contexts", "64", "--model-path", write_tiny_kimi_model(tmp_path / "kimi"))
    assert r.exit_code == 2 and "is a hybrid model" in r.output, r.output
