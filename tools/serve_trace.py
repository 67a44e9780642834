"""Where a served decode step's time goes, step by step: rank 0's loop trace ($DCPCTL_STEP_TRACE,
server/loop.py) under `dcpctl bench serve` at each concurrency.

Starts `dcpctl launch` with the given flags (after --) and the trace on, runs one warm-up bench, then one
bench per --concurrency, noting each one's window (perf_counter is CLOCK_MONOTONIC, shared with the server's
processes). Stops the server (SIGINT to its process group; the trace is written at shutdown) and, per window,
reports the steps by kind, the decode batch sizes, and for the decode-only graph steps of the most common
batch the loop period (take to next take), the host time inside engine.step, the time from step end to the
step's events sent, and (CUDA) the replay's GPU time and the GPU time between one graph step's end and the
next one's start (idle, plus the sampling and copies between them): a loop period above the GPU time with a
large gap is a host-bound loop; then the eager steps and the mixed steps whose decodes replayed their graph
beside the prompt chunks (graph+prefill, engine/mixed.py): count, tokens and host time in engine.step.  JSON
to OUT/serve_trace.json.

usage: python3 -m tools.serve_trace --out DIR [--concurrency 1,8,32] [--requests 4] [--input-len 1000]
       [--output-len 64] -- <dcpctl launch flags, e.g. --model-path DIR --device cuda>
   (--requests: per stream; a bench at concurrency c sends c * requests)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from collections import Counter
from pathlib import Path

from benchmarks import serve_launch

DECODE_GRAPH = ("graph", "graph+pipelined")     # the step kinds of decode-only graph steps (engine.last_step)


def summarize(rows: list[dict], t0: float, t1: float) -> dict:
    """One bench window's steps (rows: the trace's rows as dicts)."""
    win = [r for r in rows if t0 <= r["take"] <= t1]
    busy = [r for r in win if r["kind"] not in ("idle",)]
    kinds = Counter(r["kind"] for r in busy)
    seconds = Counter()
    for a, b in zip(win, win[1:]):
        seconds[a["kind"]] += b["take"] - a["take"]
    graph = [r for r in busy if r["kind"] in DECODE_GRAPH]
    batches = Counter(r["chunks"] for r in graph)
    out = {"steps": dict(kinds), "seconds_by_kind": {k: round(v, 4) for k, v in seconds.items()},
           "window_s": round(t1 - t0, 3), "graph_batches": dict(sorted(batches.items()))}
    if batches:
        b = batches.most_common(1)[0][0]
        idx = [i for i, r in enumerate(win) if r["kind"] in DECODE_GRAPH and r["chunks"] == b]
        period = [win[i + 1]["take"] - win[i]["take"] for i in idx if i + 1 < len(win)
                  and win[i + 1]["kind"] in DECODE_GRAPH and win[i + 1]["chunks"] == b]
        ms = lambda xs: round(statistics.median(xs) * 1e3, 4) if xs else None   # noqa: E731
        out["modal_batch"] = {"batch": b, "steps": len(idx), "period_ms_p50": ms(period),
                              "period_ms_p90": round(sorted(period)[int(0.9 * (len(period) - 1))] * 1e3, 4)
                              if period else None,
                              "take_ms_p50": ms([win[i]["step"] - win[i]["take"] for i in idx]),
                              "step_ms_p50": ms([win[i]["stepped"] - win[i]["step"] for i in idx]),
                              "deliver_ms_p50": ms([win[i]["delivered"] - win[i]["stepped"] for i in idx])}
        # engine/phases.py (older traces lack them)
        for ph in ("prepare", "graph_launch", "sampling", "resolve"):
            vals = [win[i][f"{ph}_s"] for i in idx if win[i].get(f"{ph}_s") is not None]
            if vals:
                out["modal_batch"][f"{ph}_ms_p50"] = ms(vals)
        gpu_ms = [win[i]["gpu_ms"] for i in idx if win[i].get("gpu_ms") is not None]
        gaps = [win[i]["gpu_gap_ms"] for i in idx if win[i].get("gpu_gap_ms") is not None
                and i > 0 and win[i - 1]["kind"] in DECODE_GRAPH]
        if gpu_ms:       # the GPU's own time per graph step, and from one graph step's end to the next one's
                         # start
            out["modal_batch"].update(gpu_ms_p50=round(statistics.median(gpu_ms), 4),
                                      gpu_gap_ms_p50=round(statistics.median(gaps), 4) if gaps else None)
    for kind in ("eager", "graph+prefill"):
        some = [r for r in busy if r["kind"] == kind]
        if some:
            out[kind] = {"steps": len(some), "tokens_p50": statistics.median(r["tokens"] for r in some),
                         "ms_p50": round(statistics.median(r["stepped"] - r["step"] for r in some) * 1e3, 3)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--requests", type=int, default=4, help="requests per stream")
    ap.add_argument("--input-len", type=int, default=1000)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("launch", nargs=argparse.REMAINDER, help="-- then the dcpctl launch flags")
    a = ap.parse_args()
    flags = a.launch[1:] if a.launch[:1] == ["--"] else a.launch
    a.out.mkdir(parents=True, exist_ok=True)
    trace = (a.out / "trace.json").resolve()
    trace.unlink(missing_ok=True)
    dcpctl = serve_launch.DCPCTL
    windows, benches = {}, {}
    srv, url = serve_launch.start(flags, a.out / "launch.log",
                                  {**os.environ, "DCPCTL_STEP_TRACE": str(trace)})
    try:
        def bench(c: int) -> dict:
            r = subprocess.run(dcpctl
                               + ["bench", "serve", "--url", url, "--concurrency", str(c), "--requests",
                                  str(c * a.requests), "--input-len", str(a.input_len), "--output-len",
                                  str(a.output_len), "--format", "json"], capture_output=True, text=True,
                               timeout=600)
            return json.loads(r.stdout) if r.stdout.strip() else {"error": r.stderr[-300:]}
        bench(1)                                                       # warm-up
        for c in (int(x) for x in a.concurrency.split(",")):
            t = time.perf_counter()
            res = bench(c)
            windows[c] = (t, time.perf_counter())
            benches[c] = {k: res.get(k) for k in ("itl_ms", "ttft_ms", "completed", "error") if k in res}
    finally:
        serve_launch.stop(srv)
    if not trace.exists():
        raise SystemExit(f"no trace written (see {a.out / 'launch.log'})")
    doc = json.loads(trace.read_text())
    rows = [dict(zip(doc["fields"], r)) for r in doc["rows"]]
    report = {"launch": flags, "concurrency": {c: {"bench": benches[c], **summarize(rows, *windows[c])}
                                               for c in windows}}
    (a.out / "serve_trace.json").write_text(json.dumps(report, indent=1))
    for c, d in report["concurrency"].items():
        print(f"== c={c}: ITL {d['bench'].get('itl_ms')}")
        print(f"   steps {d['steps']} seconds {d['seconds_by_kind']} of {d['window_s']} s; graph batches "
              f"{d['graph_batches']}")
        print(f"   modal {d.get('modal_batch')}  eager {d.get('eager')}  graph+prefill "
              f"{d.get('graph+prefill')}")


if __name__ == "__main__":
    main()
