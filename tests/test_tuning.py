"""dcpctl/tuning: one loader, one device rule (exact GPU, else the nearest same-architecture table, else built-in
defaults, said), and the shipped H200 tables load the values the kernels ran before they became data."""
from __future__ import annotations

import json

import pytest

from dcpctl import tuning


def test_the_device_rule():
    exact = tuning.load("gemm16", "NVIDIA H200", 90)
    assert exact.device == "NVIDIA H200" and exact.how == "measured on this GPU (NVIDIA H200, commit 90bb20f)"
    assert tuning.load("gemm16", "h200", None).data == exact.data              # the vendor prefix and case aside
    near = tuning.load("gemm16", "NVIDIA H100 80GB HBM3", 90)
    assert near.data == exact.data and near.how.startswith("no gemm16 table for NVIDIA H100 80GB HBM3: the nearest "
                                                           "sm_90 one, measured on NVIDIA H200")
    none = tuning.load("gemm16", "NVIDIA A100-SXM4-80GB", 80)
    assert none.data is None and none.how.endswith("or another sm_80 GPU: built-in defaults")


@pytest.mark.parametrize("kind", tuning.KINDS)
def test_every_kind_ships_an_h200_table_with_its_record(kind):
    doc = tuning.read(tuning.ROOT / kind / tuning.file_name("NVIDIA H200"))
    assert (doc["kind"], doc["device"], doc["sm"]) == (kind, "NVIDIA H200", 90)
    assert doc["command"] and len(doc["commit"]) >= 7


def test_mla_tiles_and_head_bmm_load_the_built_in_values_on_an_h200():
    from dcpctl.runtime.attention.kernel_config import BUILT_IN, parse_rules
    from dcpctl.runtime.kernels import head_bmm_triton
    assert parse_rules(tuning.load("mla_tiles", "NVIDIA H200", 90).data) == BUILT_IN
    assert tuning.load("head_bmm", "NVIDIA H200", 90).data == head_bmm_triton.BUILT_IN


def test_write_and_read_round_trip_and_bad_files(tmp_path):
    path = tuning.write(tmp_path / "t.json", "gemm16", "NVIDIA H200", 90, "cmd", "abc1234", {"1,2": []})
    assert tuning.read(path)["data"] == {"1,2": []}
    (tmp_path / "bad.json").write_text(json.dumps({"kind": "gemm16"}))
    with pytest.raises(tuning.TuningTableError, match="has no device, sm, command, commit, data"):
        tuning.read(tmp_path / "bad.json")
    with pytest.raises(tuning.TuningTableError, match="no tuning tables of kind 'x'"):
        tuning.load("x", "NVIDIA H200", 90)
