"""Replay SGLang 0.5.23's recorded verdicts (benchmarks/sglang/grid.py --record) against today's dcpctl.

CI cannot install SGLang; its answers for the grid's cases are in benchmarks/data/sglang_grid.json.gz.
A rule change that makes dcpctl disagree with SGLang (or crash) fails here, naming the case.
"""
import gzip
import json
from pathlib import Path

import pytest

from benchmarks.sglang import grid, grid_cases

ROOT = Path(__file__).resolve().parents[2]

RECORD = json.loads(gzip.decompress((ROOT / "benchmarks/data/sglang_grid.json.gz").read_bytes()))
STRIDE = 3  # every third case keeps the replay to seconds (all of them: about 15 s here)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return grid_cases.write_models(tmp_path_factory.mktemp("models"))


def test_record_covers_the_grid():
    assert RECORD["sglang"] == "0.5.23" and len(RECORD["cases"]) >= 1000
    assert [c["opts"] for c in RECORD["cases"]] == [c["opts"] for c in grid_cases.cases()]


def test_dcpctl_agrees_with_recorded_sglang(models):
    bad = []
    for case in RECORD["cases"][::STRIDE]:
        cls, detail = grid.classify(grid.run_dcpctl(grid_cases.dcpctl_flags(case["opts"], models)),
                                    case["sglang"])
        if cls in grid.FAILURES:
            bad.append((cls, case["opts"], detail))
    assert bad == []


def test_classify_names_each_failure():
    ok = {"valid": True, "violations": [], "resolved": {"dcp_comm_backend": "a2a", "page_size": 1}}
    sgl = {"accepted": True, "values": {"dcp_comm_backend": "a2a", "page_size": 64}}
    assert grid.classify(ok, sgl) == ("differs", {"page_size": (1, 64)})
    assert grid.classify(ok, {"accepted": False, "error": "ValueError: "
                                                          "x"})[0] == "sglang_rejects_dcpctl_accepts"
    extra = {"valid": False, "violations": [{"code": "weights_fit", "message": "m"}], "resolved": {}}
    assert grid.classify(extra, sgl)[0] == "dcpctl_rejects_explained"
    odd = {"valid": False, "violations": [{"code": "hicache_l3", "message": "m"}], "resolved": {}}
    assert grid.classify(odd, sgl)[0] == "dcpctl_rejects_unexplained"
    assert grid.classify({"crash": "ZeroDivisionError"}, sgl)[0] == "crash"
