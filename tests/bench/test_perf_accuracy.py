"""benchmarks/perf_accuracy.py on CPU: the H200 files of benchmarks/data and a bench rank file, fitted on some
cells and judged on the others, the perf table it writes read back by the planner."""

from __future__ import annotations

import json
from pathlib import Path

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


def test_a_rank_file_alone(tmp_path, capsys):
    f = tmp_path / "rank.json"
    f.write_text(json.dumps(rank_doc()))
    assert perf_accuracy.main(["--rank", str(f), "--no-data", "--fit-batches", "1,32"]) == 0
    text = capsys.readouterr().out
    assert "rank.json" in text and "Decode compute" in text and "TTFT" not in text
