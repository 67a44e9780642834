"""The performance model (dcpctl/plan/perf*.py) against measurements: fitted on some cells, judged on the
others.

    python -m benchmarks.perf_accuracy [--rank FILE ...] [--data DIR] [--save-table FILE] [--json FILE]

1. Decode compute: every measured decode cell (benchmarks/perf_sources.py: `dcpctl bench rank` files and the
   single-GPU decode files of --data) against the model's compute. The terms (perf_terms) are fitted on the
   fit cells, by default the 1st, 3rd, 5th ... cell of each source in (batch, context) order
   (--fit-batches B,...: the cells of those batches instead), and judged on the rest. Target: mean absolute
   error on the judged cells <= 10%.
2. TTFT: the prefill rates: the MHA-form attention and 16-bit GEMM rates measured by prefill_ttft.py's floor
   (its FLOPs over its time), and the FP8 GEMM rate, per-layer and per-chunk times fitted on the fit cells of
   the TTFT files (same rule), judged on the rest. Target 15%.
3. Host gap: served ITL p50 minus the CUDA-graph step of the same checkpoint at concurrency 1 and 8; the
   server's time per request: served TTFT minus the model's prefill at concurrency 1.
4. Served output throughput (perf_report.served_rate): the concurrency-1 cells gave the time per request
   (fitted), the others are judged. Target 15%.

--save-table FILE writes the perf tuning table (dcpctl/tuning/perf/device_name=GPU.json) `dcpctl plan` reads.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.perf_sources import Cell, decode_cells, rank_cells, served_cells, ttft_cells
from dcpctl import tuning
from dcpctl.plan.errors import UserError
from dcpctl.plan.perf import Model, chunked_prefill, features
from dcpctl.plan.perf_prefill import PrefillRates, chunk_work, chunks
from dcpctl.plan.perf_report import served_rate
from dcpctl.plan.perf_terms import AIC_OP_S, Terms, assumed, predict, solve_relative
from dcpctl.plan.perf_work import layer_counts
from dcpctl.plan.planner import make_plan

TARGETS = {"decode": 0.10, "ttft": 0.15, "served": 0.15}


def split(cells: list[Cell], fit_batches: set[int] | None) -> list[tuple[Cell, bool]]:
    """(cell, fitted on it): the listed batches, else every other cell of each source in (batch, context)
    order."""
    out = []
    for src in dict.fromkeys(c.source for c in cells):
        mine = sorted((c for c in cells if c.source == src), key=lambda c: (c.batch, c.context))
        out += [(c, c.batch in fit_batches if fit_batches else i % 2 == 0) for i, c in enumerate(mine)]
    return out


def decode_features(c: Cell) -> list[float]:
    p = make_plan(c.req)
    model = Model.for_request(p.request, p.decisions)
    return features(*model.work(p.request, p.decisions, c.batch, c.context))


def fit_decode(rows: list[tuple[Cell, bool]], prior: Terms) -> tuple[Terms, list[dict[str, Any]]]:
    feats = [(c, fit, decode_features(c)) for c, fit in rows]
    fitted = [(x, c.measured) for c, fit, x in feats if fit]
    terms = prior.with_values(
        solve_relative(fitted, prior.values()),
        "calibrated",
        f"{len(fitted)} cells of {', '.join(sorted({c.source.split(':')[0] for c, f, _ in feats if f}))}",
    )
    return terms, [_row(c, fit, predict(terms, x)) for c, fit, x in feats]


def _row(c: Cell, fit: bool, predicted: float) -> dict[str, Any]:
    return {
        "source": c.source,
        "batch": c.batch,
        "context": c.context,
        "measured": c.measured,
        "predicted": predicted,
        "error": predicted / c.measured - 1,
        "fit": fit,
    }


def prefill_rates(ttft: list[tuple[Cell, bool]], byte_s: float) -> tuple[PrefillRates, list[dict[str, Any]]]:
    """Attention and GEMM rates from the dense floor (its FLOPs over its times); a scale on them, the FP8
    rate per FLOP and per weight byte, the per-layer and per-chunk times fitted on the fit cells."""
    floors = [
        (c, chunk_work(c.req.model, c.req.topology, 1, False, 0, c.context))
        for c, _ in ttft
        if "floor_attention_ms_per_layer" in c.extra.get("floor", {}) and not layer_counts(c.req.model).moe
    ]
    peak = ttft[0][0].req.hardware.bf16_tflops * 1e12  # no dense floor among the files: the profile's rate
    attn = statistics.median(
        [
            w.attn_flops / w.layers / (c.extra["floor"]["floor_attention_ms_per_layer"] * 1e-3)
            for c, w in floors
        ]
        or [peak]
    )
    gemm = statistics.median(
        [w.gemm_flops / w.layers / (c.extra["floor"]["floor_gemms_ms_per_layer"] * 1e-3) for c, w in floors]
        or [peak]
    )
    feats = []
    for c, fit in ttft:
        ws = [
            chunk_work(c.req.model, c.req.topology, 1, c.req.model.weight_block is not None, s, n)
            for s, n in chunks(c.context, chunked_prefill(c.req))
        ]
        known = sum(w.gemm_flops / gemm + w.attn_flops / attn + w.weight_bytes * byte_s for w in ws)
        feats.append(
            (
                c,
                fit,
                [
                    known,
                    sum(w.fp8_flops for w in ws),
                    sum(w.fp8_bytes for w in ws),
                    sum(w.layers for w in ws),
                    float(len(ws)),
                ],
            )
        )
    prior = [1.0, 1 / gemm, 3 * byte_s, 6 * AIC_OP_S, 4 * AIC_OP_S]  # dequantizing reads 1 byte and writes 2
    x = solve_relative([(f, c.measured) for c, fit, f in feats if fit], prior)
    fitted = sorted({c.source.split(":")[0] for c, fit, _ in feats if fit})
    r = PrefillRates(
        attn / x[0],
        gemm / x[0],
        1 / x[1] if x[1] else gemm,
        x[2],
        x[3],
        x[4],
        0.0,
        "calibrated",
        f"{sum(1 for _, fit, _ in feats if fit)} TTFT cells of {', '.join(fitted)}; rates from "
        f"prefill_ttft.py's floor",
    )
    return r, [_row(c, fit, sum(a * b for a, b in zip(x, f))) for c, fit, f in feats]


def host_gap(served: list[Cell], decode: list[dict[str, Any]]) -> float:
    """Median of served ITL p50 minus the measured graph step of the same checkpoint and batch (1 and 8)."""
    steps = {(r["source"].split(":")[0], r["batch"]): r["measured"] for r in decode}
    gaps = [
        c.extra["itl_p50_s"] - steps[(c.extra["steps"], c.batch)]
        for c in served
        if c.batch in (1, 8) and (c.extra.get("steps"), c.batch) in steps
    ]
    return statistics.median(gaps) if gaps else 0.0


def _model(c: Cell, terms: Terms, rates: PrefillRates) -> tuple[Any, Any]:
    p = make_plan(c.req)
    base = Model.for_request(p.request, p.decisions)
    return p, Model(base.k, base.table, terms, rates, None)


def request_time(served: list[Cell], terms: Terms, rates: PrefillRates) -> float:
    """The server's own time per request: concurrency-1 cells' served TTFT minus the model's prefill."""
    gaps = []
    for c in served:
        if c.batch == 1:
            p, model = _model(c, terms, rates)
            gaps.append(c.extra["ttft_s"] - model.prefill(p.request, c.context).compute_s)
    return max(statistics.median(gaps), 0.0) if gaps else 0.0


def judge_served(served: list[Cell], terms: Terms, rates: PrefillRates, gap: float) -> list[dict[str, Any]]:
    """Every served cell; the concurrency-1 cells are marked fitted (their TTFT gave request_s)."""
    out = []
    for c in served:
        p, model = _model(c, terms, rates)
        out_len = c.extra["output_len"]
        work, attn = model.work(p.request, p.decisions, c.batch, c.context + out_len // 2)
        tpot = predict(terms, features(work, attn)) + gap
        pre = model.prefill(p.request, c.context, c.batch).compute_s + rates.request_s
        out.append(_row(c, c.batch == 1, served_rate(c.batch, out_len, tpot, pre)))
    return out


def mae(rows: list[dict[str, Any]], fit: bool = False) -> float | None:
    errs = [abs(r["error"]) for r in rows if r["fit"] == fit]
    return sum(errs) / len(errs) if errs else None


def report(name: str, rows: list[dict[str, Any]], unit: str, scale: float) -> None:
    print(f"\n{name} ({unit}; * = fitted on)")
    print(f"{'source':<44} {'batch':>5} {'context':>8} {'measured':>10} {'predicted':>10} {'error':>7}")
    for r in rows:
        print(
            f"{r['source'][:44]:<44} {r['batch']:>5} {r['context']:>8} {r['measured'] * scale:>10.4g} "
            f"{r['predicted'] * scale:>10.4g} {r['error']:>+7.1%}{' *' if r['fit'] else ''}"
        )
    judged, fitted = mae(rows), mae(rows, True)
    kind = name.split()[0].lower()
    verdict = (
        ""
        if judged is None
        else f" (target {TARGETS[kind]:.0%}: {'met' if judged <= TARGETS[kind] else 'not met'})"
    )
    print(f"mean absolute error: judged {_pct(judged)}{verdict}; fitted {_pct(fitted)}")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--rank", type=Path, action="append", default=[], help="a `dcpctl bench rank --format json` file"
    )
    ap.add_argument("--data", type=Path, default=Path("benchmarks/data"), help="the single-GPU files' folder")
    ap.add_argument("--no-data", action="store_true", help="judge the --rank files alone")
    ap.add_argument(
        "--fit-batches", help="fit on the cells of these batches (comma-separated); judge the rest"
    )
    ap.add_argument("--save-table", type=Path, help="write the perf tuning table here")
    ap.add_argument("--json", type=Path, help="write every cell's measured and predicted figures here")
    a = ap.parse_args(argv)
    fit_b = {int(b) for b in a.fit_batches.split(",")} if a.fit_batches else None
    dec = [c for f in a.rank for c in _rank(f)] + ([] if a.no_data else list(decode_cells(a.data)))
    if not dec:
        print("no decode cells: pass --rank FILE or a --data folder with the decode files", file=sys.stderr)
        return 2
    hw = dec[0].req.hardware
    terms, drows = fit_decode(split(dec, fit_b), assumed(hw))
    report("Decode compute", drows, "ms", 1e3)
    out: dict[str, Any] = {"decode": drows, "terms": terms.to_table()}
    rates, gap = (None, 0.0) if a.no_data else _serving(a.data, fit_b, terms, drows, out)
    print(f"\nhost gap {gap * 1e6:.1f} us; terms: {terms.to_table()}")
    if a.save_table:
        _save(a, hw, terms, drows, rates, gap, out)
    if a.json:
        a.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


def _rank(path: Path) -> list[Cell]:
    """A rank file's cells; a file whose model this machine cannot read (a checkpoint path of the GPU
    machine's) is skipped, said once."""
    try:
        return list(rank_cells(path))
    except UserError as e:
        print(f"skipped {path}: {e}", file=sys.stderr)
        return []


def _serving(
    data: Path, fit_b: set[int] | None, terms: Terms, drows: list[dict[str, Any]], out: dict[str, Any]
) -> tuple[PrefillRates | None, float]:
    """TTFT and served throughput from the files in `data` (rows added to `out`): (prefill rates, host
    gap)."""
    ttft = split(list(ttft_cells(data)), fit_b)
    served = list(served_cells(data))
    if not ttft:
        return None, host_gap(served, drows)
    rates, out["ttft"] = prefill_rates(ttft, terms.byte_s)
    report("TTFT", out["ttft"], "ms", 1e3)
    gap = host_gap(served, drows)
    if served:
        rates = replace(rates, request_s=request_time(served, terms, rates))
        out["served"] = judge_served(served, terms, rates, gap)
        report("Served output throughput", out["served"], "tok/s", 1.0)
    return rates, gap


def _save(
    a: argparse.Namespace,
    hw: Any,
    terms: Terms,
    drows: list[dict[str, Any]],
    rates: PrefillRates | None,
    gap: float,
    out: dict[str, Any],
) -> None:
    fitted = sorted({r["source"].split(":")[0] for r in drows if r["fit"]})
    data: dict[str, Any] = {
        "decode": {
            **terms.to_table(),
            "fitted_on": f"{sum(r['fit'] for r in drows)} cells of {', '.join(fitted)}",
            "judged_mae": _r(mae(drows)),
        },
        "host_gap_us": round(gap * 1e6, 1),
        "host_gap_from": "served ITL p50 minus the CUDA-graph step at concurrency 1 and 8",
    }
    if rates:
        data["prefill"] = {
            **rates.to_table(),
            "fitted_on": rates.source,
            "judged_mae": _r(mae(out["ttft"])),
            "request_from": "served TTFT minus the model's prefill at concurrency 1",
        }
    if "served" in out:
        data["served_judged_mae"] = _r(mae(out["served"]))
    cmd = "python -m benchmarks.perf_accuracy " + " ".join(sys.argv[1:])
    tuning.write(a.save_table, "perf", hw.gpu_name, hw.sm, cmd, tuning.source_commit(), data)
    print(f"wrote {a.save_table}")


def _r(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.4g}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UserError as e:  # a file or figure the model cannot use: one sentence, exit 2
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
