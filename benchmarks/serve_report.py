"""The ratios of a serve_peers.py run, as rows and as a markdown table.

    python3 -m benchmarks.serve_report DIR/serve.json      # prints the markdown again

Per cell and concurrency c (= batch c): served ITL p50 of each server variant (`bench serve`), the
`bench decode` graph and eager step at batch c and context prompt + output/2, the roofline prediction,
and Hugging Face's ITL p50 (hf_peer.py; the same definition: the median gap between consecutive tokens).
Ratios (the served-step targets): served / graph step (<= 1.3; <= 1.2 at 32K), HF compiled / served (>= 2 at
batch 1, >= 5 at batch 32), graph step / prediction (<= 1.6), first TTFT / steady TTFT (<= 2).
"""
from __future__ import annotations

import json
import sys
from typing import Any


def _get(d: Any, *keys: Any) -> Any:
    for k in keys:
        if not isinstance(d, dict) or d.get(k) is None:
            return None
        d = d[k]
    return d


def _served(s: Any, *keys: Any) -> float | None:
    """ITL or TTFT p50 of one bench serve run; None when it did not run or no request completed."""
    r = _get(s, *keys[:-1])
    return r[keys[-1]]["p50"] if isinstance(r, dict) and r.get("completed") else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _decode_row(entry: dict, batch: int, context: int) -> dict:
    rows = _get(entry, "decode", "rows") or []
    return next((r for r in rows if r["batch"] == batch and r["context"] == context), {})


def _hf(entry: dict, mode: str, batch: int, length: int) -> float | None:
    rows = _get(entry, "hf", "rows") or []
    row = next((r for r in rows if r.get("mode") == mode and r.get("batch") == batch
                and r.get("input_len") == length and "itl_ms" in r), None)
    return row["itl_ms"]["p50"] if row else None


def summarize(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """{"cells": one row per (cell, concurrency), "startup": one row per (checkpoint, server variant)}."""
    rows = []
    for cell, (ckpt, length, conc, _) in doc["cells"].items():
        entry = doc["checkpoints"].get(ckpt, {})
        for c, _n in conc:
            served = {v: _served(s, "cells", cell, str(c), "itl_ms") for v,
                      s in entry.get("serve", {}).items()}
            best = served.get("graph", served.get("default"))
            dec = _decode_row(entry, c, length + doc["output_len"] // 2)
            hf_c, hf_e = _hf(entry, "compiled", c, length), _hf(entry, "eager", c, length)
            rows.append({"cell": cell, "concurrency": c, "prompt": length, "served_itl_p50_ms": served,
                         "graph_step_ms": dec.get("graph_ms"), "eager_step_ms": dec.get("step_ms"),
                         "predicted_ms": dec.get("predicted_ms"), "hf_compiled_itl_p50_ms": hf_c,
                         "hf_eager_itl_p50_ms": hf_e, "served_vs_graph": _ratio(best, dec.get("graph_ms")),
                         "hf_compiled_vs_served": _ratio(hf_c, best), "hf_eager_vs_served": _ratio(hf_e,
                                                                                                   best),
                         "graph_vs_predicted": _ratio(dec.get("graph_ms"), dec.get("predicted_ms"))})
    startup = []
    for ckpt, entry in doc["checkpoints"].items():
        for v, s in entry.get("serve", {}).items():
            first, steady = _served(s, "first", "ttft_ms"), _served(s, "steady", "ttft_ms")
            startup.append({"checkpoint": ckpt, "variant": v, "ready_s": s.get("ready_s"),
                            "first_ttft_ms": first, "steady_ttft_ms": steady,
                            "first_vs_steady": _ratio(first, steady)})
    return {"cells": rows, "startup": startup}


def _f(x: Any, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def markdown(doc: dict[str, Any]) -> str:
    s = doc.get("summary") or summarize(doc)
    variants = sorted({v for r in s["cells"] for v in r["served_itl_p50_ms"]})
    head = ["cell", "c", *(f"served ITL p50 ({v})" for v in variants), "graph step", "eager step",
            "predicted", "HF compiled", "HF eager", "served/graph", "HF compiled/served", "graph/predicted"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in s["cells"]:
        cells = [r["cell"], str(r["concurrency"]), *(_f(r["served_itl_p50_ms"].get(v)) for v in variants),
                 _f(r["graph_step_ms"], "{:.3f}"), _f(r["eager_step_ms"]), _f(r["predicted_ms"], "{:.3f}"),
                 _f(r["hf_compiled_itl_p50_ms"]), _f(r["hf_eager_itl_p50_ms"]), _f(r["served_vs_graph"]),
                 _f(r["hf_compiled_vs_served"]), _f(r["graph_vs_predicted"])]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["",
              "| checkpoint | server | start to ready (s) | first TTFT (ms) | steady TTFT p50 (ms) | "
              "first/steady |", "| --- | --- | --- | --- | --- | --- |"]
    for r in s["startup"]:
        lines.append(f"| {r['checkpoint']} | {r['variant']} | {_f(r['ready_s'], '{:.1f}')} | "
                     f"{_f(r['first_ttft_ms'], '{:.1f}')} | {_f(r['steady_ttft_ms'], '{:.1f}')} | "
                     f"{_f(r['first_vs_steady'])} |")
    failed = [p for p in doc.get("parts", []) if p["rc"] != 0]
    if failed:
        lines += ["", "Parts that did not finish with status 0: " +
                  "; ".join(f"{p['part']} (rc {p['rc']}{', ' + p['note'] if p.get('note') else ''})"
                            for p in failed)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python3 -m benchmarks.serve_report DIR/serve.json")
    with open(sys.argv[1]) as f:
        print(markdown(json.load(f)), end="")
