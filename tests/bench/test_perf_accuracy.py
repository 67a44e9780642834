"""benchmarks/perf_accuracy.py on CPU: the H200 files of benchmarks/data and a bench rank file, fitted on some
cells and judged on the others, the perf table it writes read back by the planner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import perf_accuracy
from dcpctl import tuning
from dcpctl.plan.perf_terms import from_table, perf_table
from tests.plan.helpers import hw
from tests.plan.test_perf_report import rank_doc

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"


def test_the_h200_files_fit_and_judge_and_the_table_reads_back(tmp_path, capsys):
    table, out = tmp_path / "perf.json", tmp_path / "cells.json"
    assert perf_accuracy.main(["--data", str(DATA), "--save-table", str(table), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.count("mean absolute error: judged") == 3  # decode compute, TTFT, served throughput
    cells = json.loads(out.read_text())
    for kind in ("decode", "ttft", "served"):
        rows = cells[kind]
        assert any(r["fit"] for r in rows) and any(not r["fit"] for r in rows), kind
        assert all(abs(r["error"] - (r["predicted"] / r["measured"] - 1)) < 1e-9 for r in rows)
    doc = tuning.read(table)
    assert doc["kind"] == "perf" and doc["device"] == "NVIDIA H200" and "perf_accuracy" in doc["command"]
    terms = from_table(doc["data"]["decode"], perf_table(hw("h200-8")).decode, "t")
    assert terms.to_table() == {k: v for k, v in doc["data"]["decode"].items() if k in terms.to_table()}


def test_split_fits_every_other_cell_or_the_batches_named():
    cells = [perf_accuracy.Cell("a", None, b, 8192, 1.0) for b in (8, 1, 32, 64)]
    assert [(c.batch, f) for c, f in perf_accuracy.split(cells, None)] == [
        (1, True),
        (8, False),
        (32, True),
        (64, False),
    ]
    assert [f for _, f in perf_accuracy.split(cells, {64})] == [False, False, False, True]
    grid = [perf_accuracy.Cell("a", None, b, L, 1.0) for b in (1, 8) for L in (8192, 32768)]
    busy = [perf_accuracy.Cell("a:busiest", None, 1, 8192, 1.0, {"routing": "busiest"})]
    assert [(c.batch, c.context, f) for c, f in perf_accuracy.split(grid + busy, {1}, {32768})] == [
        (1, 8192, False),
        (1, 32768, True),
        (8, 8192, False),
        (8, 32768, False),
        (1, 8192, False),  # a busiest cell: never fitted on
    ]
    assert [f for _, f in perf_accuracy.split(grid, None, {8192})] == [True, False, True, False]


@pytest.mark.parametrize("split", [["--fit-batches", "1,32"], ["--fit-contexts", "8192,131072"]])
def test_the_h100_rank_files_meet_the_target_on_held_out_cells(tmp_path, split):
    # rank 0 of V3.1 TP 8 + DCP 8 and of Kimi K2 TP 16 + DCP 8 on one H100 (--layers 20; benchmarks/data): fitted
    # on the named cells, judged on the others, each file within the 10% target
    out = tmp_path / "cells.json"
    files = [f for name in ("v31", "k2") for f in ("--rank", str(DATA / f"rank_{name}_h100.json"))]
    assert perf_accuracy.main([*files, "--no-data", *split, "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["decode"]
    for src in ("rank_v31_h100.json", "rank_k2_h100.json"):
        mine = [r for r in rows if r["source"] == src]
        assert len(mine) == 12 and sum(r["fit"] for r in mine) in (6, 8)
        assert perf_accuracy.mae(mine) <= perf_accuracy.TARGETS["decode"], src
        busiest = [r for r in rows if r["source"] == f"{src}:busiest"]
        assert len(busiest) == 12 and not any(r["fit"] for r in busiest)
        assert perf_accuracy.mae(busiest, busiest=True) <= perf_accuracy.TARGETS["decode"], src


def test_a_rank_file_alone(tmp_path, capsys):
    f = tmp_path / "rank.json"
    f.write_text(json.dumps(rank_doc()))
    assert perf_accuracy.main(["--rank", str(f), "--no-data", "--fit-batches", "1,32"]) == 0
    text = capsys.readouterr().out
    assert "rank.json" in text and "Decode compute" in text and "TTFT" not in text
