"""dcpctl/tuning: one loader, one device rule (exact GPU, else the nearest same-architecture table, else
built-in defaults, said), and the shipped H200 tables load the values the kernels ran before they became
data."""
from __future__ import annotations

import json

import pytest

from dcpctl import tuning


def test_the_device_rule():
    exact = tuning.load("gemm16", "NVIDIA H200", 90)
    assert exact.device == "NVIDIA H200" and exact.how == "measured on this GPU (NVIDIA H200, commit 90bb20f)"
    # the vendor prefix and case aside
    assert tuning.load("gemm16", "h200", None).data == exact.data
    near = tuning.load("gemm16", "NVIDIA H100 80GB HBM3", 90)
    assert near.data == exact.data and near.how.startswith("no gemm16 table for NVIDIA H100 80GB HBM3: the "
                                                           "nearest sm_90 one, measured on NVIDIA H200")
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


# Every kind's writer: the command whose `--save-table FILE` writes the kind's table (benchmarks/README.md
# lists them)
WRITERS = {
    "attention": ("dcpctl", ["bench", "kernel"]),
    "mla_tiles": ("dcpctl", ["bench", "tiles"]),
    "gemm16": ("module", "benchmarks.gemm16_sweep"),
    "fp8_gemm": ("module", "benchmarks.fp8_gemm"),
    "head_bmm": ("module", "benchmarks.head_bmm_sweep"),
    "perf": ("module", "benchmarks.perf_accuracy"),
}


def _help(how: str, what, monkeypatch, capsys) -> str:
    if how == "dcpctl":
        from click.testing import CliRunner

        from dcpctl.cli.main import cli
        return CliRunner().invoke(cli, [*what, "--help"]).output
    import importlib
    monkeypatch.setattr("sys.argv", [what, "--help"])
    with pytest.raises(SystemExit) as e:
        importlib.import_module(what).main()
    assert e.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("kind", tuning.KINDS)
def test_every_kind_has_a_save_table_writer_the_readme_names(kind, monkeypatch, capsys):
    from pathlib import Path
    how, what = WRITERS[kind]
    assert "--save-table" in _help(how, what, monkeypatch, capsys)
    readme = (Path(__file__).resolve().parents[1] / "benchmarks" / "README.md").read_text()
    writer = f"dcpctl {' '.join(what)}" if how == "dcpctl" else f"python -m {what}"
    assert f"{writer} --save-table" in readme


def test_bench_tiles_writes_the_shipped_mla_tiles_layout():
    # the sweep's picks per head count as the H200 run chose them -> the shipped table's data, multiple 1 last
    from dcpctl.bench.tiles import tiles_table
    from dcpctl.runtime.attention.kernel_config import BUILT_IN
    best = {64: BUILT_IN[0][1], 32: BUILT_IN[1][1], 16: BUILT_IN[2][1]}
    assert tiles_table(best) == tuning.load("mla_tiles", "NVIDIA H200", 90).data


def test_head_bmm_sweep_table_takes_the_least_summed_time_per_product():
    from benchmarks.head_bmm_sweep import table
    fast = {(128, (128, 32, 4, 3), 1): 5.0, (128, (256, 32, 4, 3), 8): 6.0, (128, (256, 32, 4, 3), 32): 7.0,
            (512, (64, 64, 4, 4), 1): 5.0, (512, (64, 64, 4, 4), 8): 6.0, (512, (64, 64, 4, 4), 32): 7.0}
    settings = [(bn, bk, w, st) for bn in (64, 128, 256) for bk in (32, 64) for w in (4, 8) for st in (3, 4)]
    rows = [{"K": k, "M": m, "timed": [{"config": list(c), "us": fast.get((k, c, m), 9.0)} for c in settings]}
            for k in (128, 512) for m in (1, 8, 32)]
    assert table(rows) == tuning.load("head_bmm", "NVIDIA H200", 90).data
    # that setting failed at M=1: another wins
    rows[0]["timed"] = [t for t in rows[0]["timed"] if t["config"] != [128, 32, 4, 3]]
    assert table(rows)["by_max_k"][0][1] != {"bn": 128, "bn_2_32_rows": 256, "bk": 32, "warps": 4,
                                             "stages": 3}


def test_bench_tiles_refuses_bad_heads_and_a_machine_without_a_gpu():
    import torch
    from click.testing import CliRunner

    from dcpctl.cli.main import cli
    bad = CliRunner().invoke(cli, ["bench", "tiles", "--heads", "64,x"])
    assert bad.exit_code == 2 and "--heads 64,x: expected a comma list of integers" in bad.output
    if not torch.cuda.is_available():
        cpu = CliRunner().invoke(cli, ["bench", "tiles"])
        assert cpu.exit_code == 2 and "dcpctl bench tiles needs a CUDA GPU" in cpu.output
