"""`dcpctl bench rank` on a CUDA GPU with the tiny model: graphs captured with stand-in collectives, their
copies timed and subtracted, the served phase measured, and the same collectives per step as the CPU's eager
step."""
from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from dcpctl.cli.main import cli

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
PLAN = ["--tp-size", "4", "--dcp-size", "2", "--dcp-comm-backend", "a2a", "--batches", "1,4", "--contexts",
        "256,1024", "--reps", "3"]


def _hardware() -> list[str]:
    # the plan's hardware must be this GPU's (an H100 plans as h100-8)
    return ["--hardware", "h100-8" if "H100" in torch.cuda.get_device_name() else "h200-8"]


def _run(tmp_path, device: str) -> dict:
    out = tmp_path / f"{device}.json"
    hw = _hardware() if device == "cuda" else ["--hardware", "cpu"]
    r = CliRunner().invoke(cli, ["bench", "rank", "--device", device, *hw, *PLAN, "--out", str(out)],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(out.read_text())


def test_bench_rank_on_the_gpu(tmp_path):
    doc = _run(tmp_path, "cuda")
    assert len(doc["cells"]) == 8 and doc["host_gap_measured"] and doc["memory"]["peak_measured"]
    for c in doc["cells"]:
        assert 0 < c["standin_us"] < c["step_us"]
        assert c["compute_us"] == pytest.approx(c["step_us"] - c["standin_us"], abs=0.02)
    s = doc["served"]
    assert s["served_step_us"] > 0 and s["bench_step_us"] > 0 and 0 < s["host_gap_us"] < 10_000
    assert 0.7 < s["served_step_us"] / s["bench_step_us"] < 1.4      # the tiny model's steps are mostly
                                                                     # launches
    assert doc["memory"]["peak_bytes"] > doc["weights"]["loaded_bytes"] + s["kv_pool_bytes"]
    cpu = _run(tmp_path, "cpu")
    key = lambda cell: [(c["kind"], c["group"], c["group_size"], c["count"])  # noqa: E731
                        for c in cell["collectives"]]
    # captured = the eager step's calls
    assert [key(c) for c in doc["cells"]] == [key(c) for c in cpu["cells"]]
