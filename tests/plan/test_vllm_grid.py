"""Replay vLLM 0.34.0's recorded verdicts (benchmarks/vllm/vllm_grid.py --record) against today's `dcpctl plan --engine vllm`.

CI cannot install vLLM; its answers for the grid's cases are in benchmarks/data/vllm_grid.json.gz.
A rule change that makes dcpctl disagree with vLLM (or crash) fails here, naming the case.
"""
import gzip
import json
from pathlib import Path

import pytest

from benchmarks.vllm import vllm_grid as vgrid
from benchmarks.vllm import vllm_grid_cases as vcases

ROOT = Path(__file__).resolve().parents[2]

RECORD = json.loads(gzip.decompress((ROOT / "benchmarks/data/vllm_grid.json.gz").read_bytes()))
STRIDE = 2  # every other case: about 5 s here (all of them: about 10 s)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return vcases.write_models(tmp_path_factory.mktemp("vllm-models"))


def test_record_covers_the_grid():
    assert RECORD["vllm"] == "0.34.0" and len(RECORD["cases"]) >= 2500
    assert [c["opts"] for c in RECORD["cases"]] == [c["opts"] for c in vcases.cases()]


def test_dcpctl_agrees_with_recorded_vllm(models):
    bad = []
    for case in RECORD["cases"][::STRIDE]:
        if case["opts"].get("export"):  # vLLM's verdict holds for the line recorded: today's export must write it
            argv = vgrid.export_argv(case["opts"], models)
            if vgrid._portable(argv) != case["argv"]:
                bad.append(("export line changed", case["opts"], argv))
                continue
        cls, detail = vgrid.classify(vgrid.run_dcpctl(vcases.dcpctl_flags(case["opts"], models)), case["vllm"])
        if cls in vgrid.FAILURES:
            bad.append((cls, case["opts"], detail))
    assert bad == []


def test_classify_names_each_failure():
    ok = {"valid": True, "violations": [], "resolved": {"page_size": 64, "dcp_comm_backend": "ag_rs"}}
    v = {"accepted": True, "values": {k: None for k in vgrid.COMPARED} | {"page_size": 128, "dcp_comm_backend": "ag_rs"}}
    assert vgrid.classify(ok, v)[0] == "differs" and vgrid.classify(ok, v)[1]["page_size"] == (64, 128)
    assert vgrid.classify(ok, {"accepted": False, "error": "ValueError: x"})[0] == "vllm_rejects_dcpctl_accepts"
    extra = {"valid": False, "violations": [{"code": "weights_fit", "message": "m"}], "resolved": {}}
    assert vgrid.classify(extra, v)[0] == "dcpctl_rejects_explained"
    odd = {"valid": False, "violations": [{"code": "tp_dcp", "message": "m"}], "resolved": {}}
    assert vgrid.classify(odd, v)[0] == "dcpctl_rejects_unexplained"
    assert vgrid.classify({"crash": "ZeroDivisionError"}, v)[0] == "crash"
