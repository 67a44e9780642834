"""`dcpctl plan`'s Performance table and `recommend`'s full-step pick through the CLI (click's runner, and one
subprocess for the cost: no torch, well under a second of CPU)."""
from __future__ import annotations

import json
import resource
import subprocess
import sys

from click.testing import CliRunner

from dcpctl.cli.main import cli
from tests.plan.test_perf_report import rank_doc

ACCEPTANCE = ("plan", "--model-preset", "deepseek-v3.1", "--tp-size", "8", "--dcp-size", "8", "--hardware",
              "h200-8")


def run(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_the_acceptance_command_prints_tpot_ttft_and_tok_s_with_and_without_dcp():
    out = " ".join(run(*ACCEPTANCE).output.split())
    for row in ("TPOT (ms)", "TTFT (ms)", "output tok/s", "max concurrency", "communication (ms)", "4,608",
                "4,096", "5,120"):
        assert row in out, row
    assert "┃ dcp 1 " in out and "┃ dcp 8 a2a " in out
    for label in ("calibrated", "modelled", "derived"):
        assert f"- {label}: " in out
    assert "NCCL 2.29.2" in out and "perf table" in out


def test_json_carries_the_section_and_the_workload_flags():
    d = json.loads(run(*ACCEPTANCE, "--input-len", "2000", "--output-len", "200", "--format", "json").output)
    w = d["performance"]["workload"]
    assert (w["input_len"], w["output_len"], w["concurrency"], w["decode_context"]) == (2000, 200, 32, 2100)
    assert "input_len" not in d["request"]     # the rest of the document is the plan's as before
    d = json.loads(run(*ACCEPTANCE, "--context-len", "8192", "--concurrency", "8", "--format", "json").output)
    assert d["performance"]["workload"]["concurrency"] == 8 and d["estimate"]["concurrency"] == 8


def test_concurrency_alone_sets_the_workload_without_the_estimate():
    r = run(*ACCEPTANCE, "--concurrency", "8", "--format", "json")
    d = json.loads(r.stdout)
    assert r.exit_code == 0 and d["performance"]["workload"]["concurrency"] == 8 and "estimate" not in d
    assert d["performance"]["columns"][1]["concurrency"] == 8
    assert "no attention estimate: it is per context length, pass --context-len" in r.stderr


def test_one_prefill_chunk_for_the_memory_and_the_ttft():
    d = json.loads(run(*ACCEPTANCE, "--chunked-prefill-size", "2048", "--format", "json").stdout)
    chunk = d["performance"]["workload"]["chunked_prefill_size"]
    assert d["memory"]["mha_prefill_chunk_tokens"] == chunk == 2048
    assert "2,048 tokens" in d["performance"]["columns"][1]["ttft_ms"]["source"]


def test_plan_costs_no_torch_and_under_a_second_of_cpu():
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "dcpctl.cli.main", *ACCEPTANCE, "--format",
                        "json"],
                       capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert p.returncode == 0 and "performance" in json.loads(p.stdout)
    assert " torch" not in p.stderr and "torch." not in p.stderr
    assert (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime) < 1.0


def test_measured_file_used_or_refused_in_one_sentence(tmp_path):
    f = tmp_path / "rank.json"
    f.write_text(json.dumps(rank_doc()))
    d = json.loads(run(*ACCEPTANCE, "--measured", str(f), "--format", "json").output)
    assert d["performance"]["measured"] == str(f)
    assert d["performance"]["columns"][1]["host_gap_ms"]["label"] == "measured"
    f.write_text(json.dumps(rank_doc(tp_size=16)))
    r = run(*ACCEPTANCE, "--measured", str(f))
    assert (r.exit_code == 2 and r.output.count("\n") == 1
            and "was measured for tp_size 16, but the plan has 8" in r.output)
    r = run(*ACCEPTANCE, "--measured", str(tmp_path / "none.json"))
    assert r.exit_code == 2 and "cannot read a JSON document" in r.output


def test_recommend_picks_by_the_full_step_and_says_why(tmp_path):
    args = ("recommend", "--model-preset", "deepseek-v3.1", "--hardware", "h200-8", "--tp-size", "8",
            "--context-len", "131072", "--concurrency", "32")
    d = json.loads(run(*args, "--format", "json").output)
    rec, rows = d["recommendation"], [t for t in d["table"] if t["fits"]]
    assert rec["tpot_ms"] == min(t["tpot_ms"] for t in rows) and "ms TPOT, the full step" in rec["reason"]
    assert "collectives" in rec["reason"] and d["decode_terms"]["label"] == "calibrated"
    f = tmp_path / "rank.json"
    f.write_text(json.dumps(rank_doc(dcp_size=8, dcp_comm_backend="a2a", dcp_replicate_q_proj=True)))
    mine = next(t for t in json.loads(run(*args, "--measured", str(f), "--format", "json").output)["table"]
                if t["choice"] == "dcp 8 a2a +repQ")
    assert mine["compute_label"] == "calibrated"      # no cell of 32 x 131,072 in the file: its terms price
                                                      # it
    f.write_text(json.dumps(rank_doc(dcp_size=3)))
    r = run(*args, "--measured", str(f))
    assert r.exit_code == 2 and "which is not one of this request's choices" in r.output
