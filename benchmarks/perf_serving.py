"""The served side of benchmarks/perf_accuracy.py: TTFT and served output throughput cells, the prefill rates
fitted on some of them, and the served throughput judged against the model (perf_report.served_rate).

| device | TTFT (benchmarks/prefill_ttft.py)                   | served (`dcpctl bench serve`)               |
| ------ | --------------------------------------------------- | ------------------------------------------- |
| any    | prefill_ttft_TAG.json (its dense checkpoint),       | perf_served_TAG.json (benchmarks/           |
|        | fp8_prefill_ttft_TAG.json (the FP8 checkpoint and   | perf_served.py: the rank-moe-4 checkpoint), |
|        | its bf16 twin) where the device has one             | fp8_serve_TAG.json (the FP8 checkpoint and  |
|        |                                                     | its bf16 twin) where the device has one     |
| h200   | also prefill_ttft_moe_h200.json                     | also serve_mixed_h200.json (dense1k)        |

TTFT cells are fitted every other one in length order (4K and 32K of 4K/16K/32K/64K), judged on the rest; a
served cell of concurrency 1 gives the server's time per request (fitted), the others are judged. The host
gap: served ITL p50 minus the measured CUDA-graph step of the same checkpoint at concurrency 1 and 8 (the
`steps` source), else the bench rank files' served loop (GPU idle between graph replays).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator

from benchmarks.perf_sources import Cell, request_for, row, split
from dcpctl.plan.perf import Model, features
from dcpctl.plan.perf_prefill import PrefillRates, chunk_work, chunks
from dcpctl.plan.perf_report import served_rate
from dcpctl.plan.perf_terms import AIC_OP_S, Terms, predict, solve_relative
from dcpctl.plan.perf_work import layer_counts
from dcpctl.plan.planner import make_plan
from dcpctl.plan.request import PlanRequest


def ttft_files(device: str) -> list[tuple[str, str, str | None]]:
    """(file, checkpoint, its key in the file) of the device's TTFT files."""
    return [(f"prefill_ttft_{device}.json", "dense-4", None),
            *([("prefill_ttft_moe_h200.json", "moe-16", None)] if device == "h200" else []),
            (f"fp8_prefill_ttft_{device}.json", "v3-fp8", "v3-fp8"),
            (f"fp8_prefill_ttft_{device}.json", "v3-fp8-bf16", "v3-fp8-bf16")]


def ttft_cells(data: Path, device: str = "h200") -> Iterator[Cell]:
    """Single prompts on an idle engine (benchmarks/prefill_ttft.py): dcpctl_ms, on the device's files."""
    files = ttft_files(device)
    for name, ckpt, key in files:
        f = data / name
        if not f.exists():
            continue
        doc = json.loads(f.read_text())
        doc = doc[key] if key else doc
        req = replace(request_for(ckpt, device), engine_args=(("--chunked-prefill-size",
                                                                str(doc["chunked_prefill_size"])),))
        for length, r in doc["lengths"].items():
            if "dcpctl_ms" in r:
                yield Cell(f"{name}:{ckpt}", req, 1, int(length), r["dcpctl_ms"] * 1e-3, {"floor": r})


def served_cells(data: Path, device: str = "h200") -> Iterator[Cell]:
    """`dcpctl bench serve` output throughput (closed loop: c clients, each one request at a time);
    `steps`: the decode source whose graph steps are this server's (the host gap)."""
    f = data / f"perf_served_{device}.json"
    if f.exists():
        doc = json.loads(f.read_text())
        runs = {c: r for c, r in doc["serve"].get("cells", {}).items() if r and r.get("completed")}
        yield from _served(f.name, request_for(doc["checkpoint"], device), runs, doc["steps"])
    f = data / "serve_mixed_h200.json"
    if device == "h200" and f.exists():
        runs = json.loads(f.read_text())["cells"]["dense1k"]["serve"]["cells"]["dense"]
        yield from _served(f"{f.name}:dense1k", request_for("dense-4"), runs, "step_fusions_h200.json")
    f = data / f"fp8_serve_{device}.json"
    if f.exists():
        doc = json.loads(f.read_text())["starts"]
        for ck, name in (("fp8", "v3-fp8"), ("bf16", "v3-fp8-bf16")):
            src = f"{f.name}:{ck}"   # its steps: the decode source of the same name (this checkpoint's)
            yield from _served(src, request_for(name, device), doc[ck]["bench"], src)


def _served(source: str, req: PlanRequest, runs: dict[str, Any], steps: str) -> Iterator[Cell]:
    for c, r in runs.items():
        tput = r.get("output_throughput", r.get("output_token_throughput"))
        yield Cell(
            source,
            req,
            int(c),
            r["input_len"],
            float(tput),
            {
                "output_len": r["output_len"],
                "itl_p50_s": r["itl_ms"]["p50"] * 1e-3,
                "ttft_s": r["ttft_ms"]["mean"] * 1e-3,
                "steps": steps,
            },
        )



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
            for s, n in chunks(c.context, c.req.chunked_prefill_size)
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
    return r, [row(c, fit, sum(a * b for a, b in zip(x, f))) for c, fit, f in feats]


def host_gap(served: list[Cell], decode: list[dict[str, Any]]) -> float | None:
    """Median of served ITL p50 minus the measured graph step of the same checkpoint and batch (1 and 8); None
    where no served cell has its step. A served cell's `steps` names a decode source (file:section, where one
    file holds several checkpoints' steps) or a file of one checkpoint's steps."""
    rows = [r for r in decode if r.get("routing") != "busiest"]
    steps = {(r["source"].split(":")[0], r["batch"]): r["measured"] for r in rows}
    steps.update({(r["source"], r["batch"]): r["measured"] for r in rows})
    gaps = [
        c.extra["itl_p50_s"] - steps[(c.extra["steps"], c.batch)]
        for c in served
        if c.batch in (1, 8) and (c.extra.get("steps"), c.batch) in steps
    ]
    return statistics.median(gaps) if gaps else None


SERVED_GAP = "served ITL p50 minus the CUDA-graph step at concurrency 1 and 8"
RANK_GAP = "bench rank's served loop: the GPU's idle time between graph replays (median of the rank files)"


@dataclass(frozen=True)
class Serving:
    rates: PrefillRates | None
    gap_s: float
    gap_from: str
    ttft: list[dict[str, Any]]
    served: list[dict[str, Any]]


def serving(data: Path | None, device: str, terms: Terms, decode: list[dict[str, Any]],
            rank_gaps: list[float]) -> Serving:
    """TTFT and served throughput of the device's files in `data` (None: none), judged against the model with
    `terms`; the host gap from them, else from the rank files' served loops."""
    ttft = split(list(ttft_cells(data, device)), None) if data else []
    served = list(served_cells(data, device)) if data else []
    gap, how = host_gap(served, decode), SERVED_GAP
    if gap is None:
        gap, how = (statistics.median(rank_gaps), RANK_GAP) if rank_gaps else (0.0, "none measured: 0")
    if not ttft:
        return Serving(None, gap, how, [], [])
    rates, rows = prefill_rates(ttft, terms.byte_s)
    if not served:
        return Serving(rates, gap, how, rows, [])
    rates = replace(rates, request_s=request_time(served, terms, rates))
    return Serving(rates, gap, how, rows, judge_served(served, terms, rates, gap))


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
        out.append(row(c, c.batch == 1, served_rate(c.batch, out_len, tpot, pre)))
    return out
