"""benchmarks/perf_accuracy.py on CPU: the H200 files of benchmarks/data and a bench rank file, fitted on some
cells and judged on the others, the perf table it writes read back by the planner."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks import perf_accuracy, perf_serving, perf_sources
from dcpctl import tuning
from dcpctl.plan.errors import UserError
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
    # rank 0 of V3.1 TP 8 + DCP 8 and of Kimi K2 TP 16 + DCP 8 on one H100 (--layers 20; benchmarks/data):
    # fitted on the named cells, judged on the others, each file within the 10% target
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

    with pytest.raises(UserError, match="0 cells of the files: no cells to fit"):   # the prior is no fit
        perf_accuracy.main(["--rank", str(f), "--no-data", "--fit-batches", "3"])


def test_a_devices_served_files_are_read_by_their_names(tmp_path, capsys):
    # the files benchmarks/perf_served.py writes on an H100, made here from measured files of the same shapes:
    # its decode steps (a bench rank file of the served checkpoint), the TTFT file and the served one
    shutil.copy(DATA / "rank_tp1_h100.json", tmp_path / "rank_served_h100.json")
    shutil.copy(DATA / "prefill_ttft_h200.json", tmp_path / "prefill_ttft_h100.json")
    bench = json.loads((DATA / "fp8_serve_h200.json").read_text())["starts"]["bf16"]["bench"]
    cells = {c: bench[c] for c in ("1", "8", "32", "64")}
    doc = {"checkpoint": "rank-moe-4", "steps": "rank_served_h100.json",
           "serve": {"ready_s": 30.0, "cells": cells}}
    (tmp_path / "perf_served_h100.json").write_text(json.dumps(doc))
    table, out = tmp_path / "perf.json", tmp_path / "cells.json"
    argv = ["--device", "h100", "--data", str(tmp_path), "--save-table", str(table), "--json", str(out)]
    assert perf_accuracy.main(argv) == 0
    rows = json.loads(out.read_text())
    assert [(r["context"], r["fit"]) for r in rows["ttft"]] == [(4096, True), (16384, False), (32768, True),
                                                                 (65536, False)]
    assert [(r["batch"], r["fit"]) for r in rows["served"]] == [(1, True), (8, False), (32, False),
                                                                (64, False)]
    data = tuning.read(table)
    assert data["device"] == "NVIDIA H100 80GB HBM3" and "prefill" in data["data"]
    assert data["data"]["host_gap_from"].startswith("served ITL p50")      # the served cells' own steps
    assert "rank_served_h100.json" in capsys.readouterr().out


def test_the_served_parts_flags_are_the_commands_own():
    # benchmarks/perf_served.py's command lines parse as `dcpctl bench rank`, `launch` and `bench serve`
    # options (no GPU here: parsed, not run); its files are named by the device, five in one folder
    import click

    from benchmarks import perf_served
    from dcpctl.cli.main import cli

    def parse(argv):
        args = argv[argv.index("dcpctl.cli.main") + 1:]
        cmd, ctx = cli, click.Context(cli)
        while isinstance(cmd, click.Group):
            cmd = cmd.get_command(ctx, args[0])
            args, ctx = args[1:], click.Context(cmd, parent=ctx)
        return cmd.make_context(cmd.name, list(args), parent=ctx).params

    f = perf_served.files(Path("/o"), perf_served.device_tag("NVIDIA H100 80GB HBM3"))
    assert sorted(p.name for p in f.values()) == ["children.log", "perf_served_h100.json",
                                                  "prefill_ttft_h100.json", "rank_served_h100.json",
                                                  "server.log"]
    rank = parse(perf_served.rank_argv(f, Path("/tmp/dcpctl-rank-moe")))
    assert (rank["weights_from"] == "checkpoint" and rank["contexts"] == "1280"
            and rank["out"] == str(f["rank"]))
    assert parse(perf_served.launch_argv(Path("/c")))["max_running_requests"] == 64   # and graphs up to it
    assert parse(perf_served.serve_argv("http://h:1", 32, 96))["num_requests"] == 96
    assert perf_served.ttft_argv(f)[3:] == [str(f["ttft"]), "--lengths", "4096,16384,32768,65536",
                                            "--hf-lengths", "", "--reps", "3"]


def test_a_devices_fp8_serve_file_gives_decode_steps_and_served_cells(tmp_path):
    # fp8_serve_TAG.json on any device: its `step` rows are decode cells and its served cells are judged, on
    # that device's hardware; another device's file in the folder is not read
    for name in ("fp8_serve_h100.json", "prefill_ttft_h100.json", "fp8_serve_h200.json"):
        shutil.copy(DATA / name, tmp_path / name)
    cells = list(perf_sources.decode_cells(tmp_path, "h100"))
    assert {c.source for c in cells} == {"fp8_serve_h100.json:fp8", "fp8_serve_h100.json:bf16"}
    assert {c.req.hardware.gpu_name for c in cells} == {"NVIDIA H100 80GB HBM3"}
    assert {c.req.model.name for c in cells} == {"v3-fp8", "v3-fp8-bf16"}
    served = list(perf_serving.served_cells(tmp_path, "h100"))
    want = [(f"fp8_serve_h100.json:{ck}", b) for ck in ("fp8", "bf16") for b in (1, 8, 32, 64)]
    assert [(c.source, c.batch) for c in served] == want
    assert {c.req.hardware.gpu_name for c in served} == {"NVIDIA H100 80GB HBM3"}
    out = tmp_path / "cells.json"
    assert perf_accuracy.main(["--device", "h100", "--data", str(tmp_path), "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert len(rows["decode"]) == 24 and len(rows["served"]) == 8
    assert all("h200" not in r["source"] for kind in ("decode", "ttft", "served") for r in rows[kind])


def test_the_host_gap_takes_each_checkpoints_own_step():
    # one file holding two checkpoints' steps (fp8_serve's fp8 and bf16): a served cell is measured against
    # its own section's step; a file of one checkpoint's steps is named by the file
    def served(src, steps, batch, itl_ms):
        return perf_sources.Cell(src, None, batch, 1000, 1.0, {"itl_p50_s": itl_ms * 1e-3, "steps": steps})

    decode = [{"source": f"f.json:{ck}", "batch": b, "measured": ms * 1e-3}
              for ck, ms in (("fp8", 1.0), ("bf16", 2.0)) for b in (1, 8)]
    decode.append({"source": "rank.json", "batch": 1, "measured": 3e-3})
    cells = [served(f"f.json:{ck}", f"f.json:{ck}", b, ms + 0.05) for ck, ms in (("fp8", 1.0), ("bf16", 2.0))
             for b in (1, 8)]
    assert perf_serving.host_gap(cells, decode) == pytest.approx(50e-6)
    assert perf_serving.host_gap([served("p.json", "rank.json", 1, 3.02)], decode) == pytest.approx(20e-6)
    assert perf_serving.host_gap([served("p.json", "none.json", 1, 3.02)], decode) is None
