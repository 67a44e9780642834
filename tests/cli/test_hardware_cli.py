"""plan and recommend on detected hardware (a fake probe): profile figures, calibration, or a refusal."""
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dcpctl.cli.main import cli
from dcpctl.plan.detect import Gpu, Probe

H200 = Probe((Gpu(0, "NVIDIA H200", 140.4, 90, "GPU-a"),), "nvml", fabric_state="not supported")
H200_NVL = Probe((Gpu(0, "NVIDIA H200 NVL", 140.4, 90, "GPU-a"),), "nvml")   # no profile has this part
CAL = str(Path(__file__).parents[2] / "benchmarks" / "data" / "calibration_h200.yaml")
KIMI = ["--model-preset", "kimi-linear-48b-a3b", "--tp-size", "1", "--context-len", "32768", "--concurrency",
        "8"]


@pytest.fixture
def machine(monkeypatch):
    def use(found):
        monkeypatch.setattr("dcpctl.plan.hardware.probe", lambda: found)
    return use


def run(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_detected_h200_uses_h200_figures_and_says_so(machine):
    machine(H200)
    d = json.loads(run("plan", *KIMI, "--format", "json").output)
    assert d["hardware"]["hbm_tbps"] == 4.8 and d["hardware"]["figures"]["hbm_tbps"] == "profile h200-8"
    assert d["hardware"]["profile"] == "h200-8: NVIDIA H200 with 140.4 GiB is profile h200-8's GPU"
    named = json.loads(run("plan", *KIMI, "--hardware", "h200-8", "--format", "json").output)
    assert d["estimate"]["constants"] == "profile h200-8"
    assert d["estimate"]["plan"]["step_attention_ms"] == named["estimate"]["plan"]["step_attention_ms"]
    r = json.loads(run("recommend", *KIMI, "--format", "json").output)
    assert r["constants"] == "profile h200-8" and [t["choice"] for t in r["table"]] == ["dcp 1"]


def test_plan_table_lists_dcp1_once_and_where_figures_came_from(machine):
    machine(H200)
    out = run("plan", *KIMI).output
    estimate = out[out.index("Estimate at 8"):]
    assert estimate.count("│ dcp 1 ") == 1 and "the plan is dcp 1" in estimate
    assert "│ memory bandwidth   │ 4.8 TB/s" in out and "profile h200-8" in out


def test_unknown_gpu_refuses_to_rank_and_plan_says_why(machine):
    machine(H200_NVL)
    r = run("recommend", *KIMI)
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert ("error: dcpctl recommend cannot rank the choices: the cost figures hbm_tbps, bf16_tflops of "
            "NVIDIA H200 NVL (hardware detected-1x) are unknown (no built-in profile has NVIDIA H200 NVL "
            "with 140.4 GiB)" in " ".join(r.output.split()))
    p = run("plan", *KIMI, "--format", "json")
    e = json.loads(p.output)["estimate"]
    assert (p.exit_code == 0 and e["constants"] is None
            and e["unavailable"].startswith("the cost figures hbm_tbps"))
    text = " ".join(run("plan", *KIMI).output.split())
    assert ("No estimate at 8 concurrent requests: the cost figures hbm_tbps, bf16_tflops of NVIDIA H200 "
            "NVL" in text)


def test_calibration_names_the_figures_of_an_unknown_gpu(machine):
    machine(H200_NVL)
    d = json.loads(run("plan", *KIMI, "--calibration", CAL, "--format", "json").output)
    assert (d["hardware"]["figures"]["hbm_tbps"] == f"calibration {CAL}"
            and d["hardware"]["hbm_tbps"] == 4.2617)
    assert d["estimate"]["constants"].startswith(f"calibration {CAL}")
    r = run("recommend", *KIMI, "--calibration", CAL, "--format", "json")
    assert r.exit_code == 0 and json.loads(r.output)["recommendation"]["choice"] == "dcp 1"
