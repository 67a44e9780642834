"""The performance model (dcpctl/plan/perf*.py) against measurements: fitted on some cells, judged on the
others.

    python -m benchmarks.perf_accuracy [--device TAG] [--rank FILE ...] [--data DIR] [--no-data]
        [--fit-batches B,...] [--fit-contexts L,...] [--save-table FILE] [--json FILE]

One GPU's files at a time: --device TAG (h200, the default; h100, ...) reads its files in --data (named by it:
benchmarks/perf_sources.py, perf_serving.py); --rank adds bench rank files; --no-data reads the --rank files
alone.

1. Decode compute: every measured decode cell (the device's `dcpctl bench rank` files, as they ran, and its
   single-GPU decode files: fp8_serve_TAG.json's steps, the H200's others) against the model's compute. The
   terms (perf_terms) are fitted on the fit cells, by default the 1st, 3rd, 5th ... cell of each source in
   (batch, context) order (--fit-batches B,... and/or --fit-contexts L,...: the cells of those instead), and
   judged on the rest; a rank file's `busiest` cells are judged apart (the model's own expected experts).
   Target: mean absolute error on the judged cells <= 10%.
2. TTFT: the prefill rates: the MHA-form attention and 16-bit GEMM rates measured by prefill_ttft.py's floor
   (its FLOPs over its time), and the FP8 GEMM rate, per-layer and per-chunk times fitted on every other TTFT
   cell in length order, judged on the rest. Target 15%.
3. Host gap: served ITL p50 minus the CUDA-graph step of the same checkpoint at concurrency 1 and 8 (else the
   rank files' served loops); the server's time per request: served TTFT minus the model's prefill at
   concurrency 1.
4. Served output throughput (perf_report.served_rate): the concurrency-1 cells gave the time per request
   (fitted), the others are judged. Target 15%.

--save-table FILE writes the perf tuning table (dcpctl/tuning/perf/device_name=GPU.json) `dcpctl plan` reads.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.perf_serving import Serving, serving
from benchmarks.perf_sources import Cell, decode_cells, rank_cells, rank_files, row, split
from dcpctl import tuning
from dcpctl.plan import perf_terms
from dcpctl.plan.errors import UserError
from dcpctl.plan.perf import Model, features
from dcpctl.plan.perf_measured import read_measured
from dcpctl.plan.perf_terms import Terms, assumed, predict
from dcpctl.plan.perf_work import Ran
from dcpctl.plan.planner import make_plan

TARGETS = {"decode": 0.10, "ttft": 0.15, "served": 0.15}


def decode_features(c: Cell) -> list[float]:
    p = make_plan(c.req)
    model = Model.for_request(p.request, p.decisions)
    return features(*model.work(p.request, p.decisions, c.batch, c.context, c.extra.get("ran", Ran())))


def fit_decode(rows: list[tuple[Cell, bool]], prior: Terms) -> tuple[Terms, list[dict[str, Any]]]:
    feats = [(c, fit, decode_features(c)) for c, fit in rows]
    fitted = [(x, c.measured) for c, fit, x in feats if fit]
    names = ", ".join(sorted({c.source.split(":")[0] for c, f, _ in feats if f}))
    # no cell to fit on (--fit-batches/--fit-contexts naming none): perf_terms.fit's UserError
    terms = perf_terms.fit(fitted, prior, f"{len(fitted)} cells of {names or 'the files'}")
    return terms, [row(c, fit, predict(terms, x)) for c, fit, x in feats]


def mae(rows: list[dict[str, Any]], fit: bool = False, busiest: bool = False) -> float | None:
    """Mean absolute error of the fitted or the judged cells (busiest: a bench rank file's `busiest` cells
    instead: judged, with the model's own expected experts)."""
    errs = [
        abs(r["error"])
        for r in rows if (r.get("routing") == "busiest") == busiest and (busiest or r["fit"] == fit)
    ]
    return sum(errs) / len(errs) if errs else None


def report(name: str, rows: list[dict[str, Any]], unit: str, scale: float) -> None:
    print(f"\n{name} ({unit}; * = fitted on)")
    print(f"{'source':<44} {'batch':>5} {'context':>8} {'measured':>10} {'predicted':>10} {'error':>7}")
    for r in rows:
        print(
            f"{r['source'][:44]:<44} {r['batch']:>5} {r['context']:>8} {r['measured'] * scale:>10.4g} "
            f"{r['predicted'] * scale:>10.4g} {r['error']:>+7.1%}{' *' if r['fit'] else ''}"
        )
    target = TARGETS[name.split()[0].lower()]
    print(f"mean absolute error: {_summary(rows, target)}")
    sources = list(dict.fromkeys(r["source"].split(":")[0] for r in rows))
    for src in sources if len(sources) > 1 else []:
        print(f"  {src}: {_summary([r for r in rows if r['source'].split(':')[0] == src], target)}")


def _summary(rows: list[dict[str, Any]], target: float) -> str:
    judged, fitted, busiest = mae(rows), mae(rows, True), mae(rows, busiest=True)
    verdict = "" if judged is None else f" (target {target:.0%}: {'met' if judged <= target else 'not met'})"
    more = ("" if busiest is None
            else f"; busiest routing (judged, the model's expected experts) {_pct(busiest)}")
    return f"judged {_pct(judged)}{verdict}; fitted {_pct(fitted)}{more}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--rank", type=Path, action="append", default=[], help="a `dcpctl bench rank --format json` file"
    )
    ap.add_argument("--data", type=Path, default=Path("benchmarks/data"), help="the measured files' folder")
    ap.add_argument("--device", default="h200",
                    help="the GPU whose files in --data are read: h200, h100, ...")
    ap.add_argument("--no-data", action="store_true", help="judge the --rank files alone")
    ap.add_argument(
        "--fit-batches", help="fit on the cells of these batches (comma-separated); judge the rest"
    )
    ap.add_argument(
        "--fit-contexts", help="fit on the cells of these contexts (comma-separated; with --fit-batches: "
        "both)"
    )
    ap.add_argument("--save-table", type=Path, help="write the perf tuning table here")
    ap.add_argument("--json", type=Path, help="write every cell's measured and predicted figures here")
    a = ap.parse_args(argv)
    a.command = " ".join(["python -m benchmarks.perf_accuracy", *(sys.argv[1:] if argv is None else argv)])
    fit_b = {int(b) for b in a.fit_batches.split(",")} if a.fit_batches else None
    fit_c = {int(L) for L in a.fit_contexts.split(",")} if a.fit_contexts else None
    ranks = a.rank + ([] if a.no_data else rank_files(a.data, a.device))
    dec = [c for f in ranks for c in _rank(f)] + ([] if a.no_data else list(decode_cells(a.data, a.device)))
    if not dec:
        print("no decode cells: pass --rank FILE or a --data folder with the device's files", file=sys.stderr)
        return 2
    gpus = sorted({c.req.hardware.gpu_name for c in dec})
    if len(gpus) > 1:
        raise UserError(f"the cells ran on {' and '.join(gpus)}: fit one GPU's files at a time (--device)")
    hw = dec[0].req.hardware
    terms, drows = fit_decode(split(dec, fit_b, fit_c), assumed(hw))
    report("Decode compute", drows, "ms", 1e3)
    gaps = [g for g in (read_measured(f).host_gap_s for f in ranks) if g is not None]
    sv = serving(None if a.no_data else a.data, a.device, terms, drows, gaps)
    out: dict[str, Any] = {"decode": drows, "terms": terms.to_table(), "ttft": sv.ttft, "served": sv.served}
    if sv.ttft:
        report("TTFT", sv.ttft, "ms", 1e3)
    if sv.served:
        report("Served output throughput", sv.served, "tok/s", 1.0)
    print(f"\nhost gap {sv.gap_s * 1e6:.1f} us ({sv.gap_from}); terms: {terms.to_table()}")
    if a.save_table:
        _save(a, hw, terms, drows, sv)
    if a.json:
        a.json.write_text(json.dumps({k: v for k, v in out.items() if v}, indent=1) + "\n")
    return 0


def _rank(path: Path) -> list[Cell]:
    """A rank file's cells; a file whose model this machine cannot read (a checkpoint path of the GPU
    machine's) is skipped, said once."""
    try:
        return list(rank_cells(path))
    except UserError as e:
        print(f"skipped {path}: {e}", file=sys.stderr)
        return []


def _save(a: argparse.Namespace, hw: Any, terms: Terms, drows: list[dict[str, Any]], sv: Serving) -> None:
    fitted = sorted({r["source"].split(":")[0] for r in drows if r["fit"]})
    data: dict[str, Any] = {
        "decode": {
            **terms.to_table(),
            "fitted_on": f"{sum(r['fit'] for r in drows)} cells of {', '.join(fitted)}",
            "judged_mae": _r(mae(drows)),
        },
        "host_gap_us": round(sv.gap_s * 1e6, 1),
        "host_gap_from": sv.gap_from,
    }
    if sv.rates:
        data["prefill"] = {
            **sv.rates.to_table(),
            "fitted_on": sv.rates.source,
            "judged_mae": _r(mae(sv.ttft)),
            "request_from": "served TTFT minus the model's prefill at concurrency 1",
        }
    if sv.served:
        data["served_judged_mae"] = _r(mae(sv.served))
    tuning.write(a.save_table, "perf", hw.gpu_name, hw.sm, a.command, tuning.source_commit(), data)
    print(f"wrote {a.save_table}")


def _r(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.4g}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UserError as e:  # a file or figure the model cannot use: one sentence, exit 2
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
