"""One call, one machine: the scheduler under real traffic, as `dcpctl launch` + `bench serve`.

    python3 -m benchmarks.serve_mixed --out DIR [--smoke] [--cells stall,moe,early,dense1k] [--budget-s 540]
        [--stall-repeats 1] [--stall-warmup 0] [--stall-variants mixed,unmixed,mixed-quarter]

Checkpoints are serve_peers.py's (dense: V3 attention, 4 dense layers; moe: 16 layers, 15 MoE).  Cells:
  stall    dense: 8 background streams decoding (32-token prompts, 6000 tokens) while 4 prompts of 16K tokens
           arrive (Poisson, 1/s); servers with mixed steps (the default) and with --disable-mixed-chunk (prefill
           first, the earlier behaviour), and mixed with a quarter of the budget (2048); the step trace
           ($DCPCTL_STEP_TRACE) gives the time of steps that carry a whole prefill budget (--chunked-prefill-size,
           8192 by default).  The servers run side by side; --stall-repeats N runs the arrivals against each
           in turn N times (the throughput median per server), after --stall-warmup unrecorded rounds.
           Targets: background ITL p99 <= that step time and < 30 ms; total throughput of mixed >= unmixed.
  moe      moe: 160 requests of 1000 +- 50% tokens, 64 +- 50% out, at concurrency 32, Poisson 40/s, at the
           default budget and at --chunked-prefill-size 2048 and 1024; the step trace's steps by kind and tokens carried.
           Target: ITL p99 <= 5 x p50.
  early    dense: 96 requests of 1000 tokens at concurrency 32 with max_tokens 2000 and stop strings (they end
           early), then the same prompts with max_tokens = the lengths the first run produced; the pool holds
           32 x 1500 tokens (less than 32 x (1000 + 2000)).  One unrecorded early run first, then two recorded
           pairs.  Target: throughput ratio fitted / early (medians) <= 1.2.
  dense1k  serve_peers.py's dense cell (1000-token prompts, concurrency 1/8/32) and its `bench decode` graph step.
           Target: served ITL p50 / graph step <= 1.3 (serve_report.py's served_vs_graph).
Every part's exit status and log is recorded (serve_procs.Run); a part past --budget-s is skipped.  Writes
DIR/mixed.json.  --smoke: the same on CPU with the tiny checkpoint and small sizes (a check of the script).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks import serve_peers, serve_report
from benchmarks.serve_procs import Run, Server, dcpctl

BUDGET = 8192           # the default --chunked-prefill-size: the prefill tokens of one step
STOPS = ["e", "t", "a", "o"]


def sizes(smoke: bool) -> dict[str, Any]:
    if smoke:
        return {"bg": (2, 16, 48), "long": (2, 300), "moe": (12, 40, 8, 8, 20.0), "early": (8, 40, 200, 4)}
    return {"bg": (8, 32, 6000), "long": (4, 16384), "moe": (160, 1000, 64, 32, 40.0),
            "early": (96, 1000, 2000, 32)}


def launch(run: Run, ckpt: Path, tag: str, max_running: int, tokens: int, *extra: str,
           env: dict | None = None) -> Server:
    a = ["launch", "--model-path", str(ckpt), "--device", run.device, "--tp-size", "1", "--dcp-size", "1",
         "--port", "0", "--page-size", "64" if not run.smoke else "16", "--max-running-requests", str(max_running),
         "--max-total-tokens", str(tokens), "--dtype", "float32" if run.smoke else "bfloat16", *extra]
    a += ["--hardware", "cpu"] if run.smoke else ["--cuda-graph-max-bs-decode", str(max_running)]
    old = dict(os.environ)
    os.environ.update(env or {})
    try:
        return Server(dcpctl(*a), run.logs / f"{tag}.log", min(600, run.left()))
    finally:
        os.environ.clear()
        os.environ.update(old)


def bench(run: Run, tag: str, url: str, *args: str) -> dict | None:
    _, out = run.cmd(tag, dcpctl("bench", "serve", "--url", url, "--format", "json", *args), timeout=600)
    try:
        return json.loads(out) if out.strip() else None
    except ValueError:
        return None


def retracted(url: str) -> float | None:
    try:
        text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    except OSError:
        return None
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("dcpctl_retracted_requests_total"))


def stop(run: Run, srv: Server, tag: str) -> None:
    rc = srv.stop()
    run.record(tag, rc if srv.url else None, time.monotonic() - srv.t0, "" if srv.url else "never ready")


STALL_VARIANTS = ("mixed", "unmixed", "mixed-quarter")


def stall(run: Run, ckpt: Path, repeats: int = 1, warmup: int = 0,
          variants: tuple[str, ...] = STALL_VARIANTS) -> dict[str, Any]:
    """The variants' servers up side by side; the same arrivals run against each in turn, `warmup` unrecorded
    rounds (a fresh server's first requests pay one-time costs) and then `repeats` recorded ones, so every
    variant meets the same machine state and a round-to-round drift cannot favour one."""
    (n_bg, bg_in, bg_out), (n_long, long_len) = sizes(run.smoke)["bg"], sizes(run.smoke)["long"]
    chunk = 64 if run.smoke else BUDGET
    flags_of = {"mixed": (chunk, []), "unmixed": (chunk, ["--disable-mixed-chunk"]),
                "mixed-quarter": (chunk // 4, [])}
    servers: dict[str, tuple[Server, int, Path]] = {}
    if run.left() < 90:          # all the servers or none: the cell compares them
        for variant in variants:
            run.record(f"stall-{variant}", None, 0, "skipped: budget spent")
        return {}
    for variant in variants:
        size, flags = flags_of[variant]
        tag, trace = f"stall-{variant}", run.out / f"trace-stall-{variant}.json"
        servers[variant] = (launch(run, ckpt, tag, 16, n_bg * (bg_in + bg_out) + n_long * (long_len + 64) + 4096,
                                   "--chunked-prefill-size", str(size), *flags,
                                   env={"DCPCTL_STEP_TRACE": str(trace)}), size, trace)
    runs: dict[str, list[dict | None]] = {v: [] for v in servers}
    for r in range(-warmup, repeats):
        if r > -warmup and run.left() < 15 * len(servers):   # whole rounds only: each server meets the same ones
            run.record(f"stall-round-{r + 1}", None, 0, "skipped: budget spent")
            break
        for variant, (srv, _, _) in servers.items():
            if not srv.url:
                continue
            tag = f"warmup{r + warmup + 1}" if r < 0 else "bench" + (f"-{r + 1}" if r else "")
            res = bench(
                run, f"stall-{variant}-{tag}", srv.url, "--background-streams",
                str(n_bg), "--background-input-len", str(bg_in), "--background-output-len", str(bg_out), "--requests",
                str(n_long), "--input-len", str(long_len), "--output-len", "16", "--request-rate", "1",
                "--concurrency", str(n_long), "--seed", "1")
            if r >= 0:
                runs[variant].append(res)
    out: dict[str, Any] = {}
    for variant, (srv, size, trace) in servers.items():
        stop(run, srv, f"stall-{variant}")
        res = runs[variant]
        tput = [b["total_token_throughput"] for b in res if b]
        out[variant] = {"chunked_prefill_size": size, "bench": res[0] if res else None,
                        "budget_steps_ms": budget_steps(trace, size),
                        "rounds": [{"total_token_throughput": b["total_token_throughput"],
                                    "background_p99_itl_ms": b["classes"]["background"]["p99_itl_ms"]}
                                   if b else None for b in res],
                        "total_token_throughput_median": statistics.median(tput) if tput else None}
    return out


def budget_steps(trace: Path, chunk: int) -> dict[str, Any] | None:
    """Wall time of the steps that carried at least `chunk` tokens (a full prefill budget), from the step
    trace."""
    if not trace.exists():
        return None
    doc = json.loads(trace.read_text())
    rows = [dict(zip(doc["fields"], r)) for r in doc["rows"]]
    ms = sorted((r["stepped"] - r["step"]) * 1e3 for r in rows if r["tokens"] >= chunk)
    return {"count": len(ms), "median": ms[len(ms) // 2], "max": ms[-1]} if ms else {"count": 0}


def moe(run: Run, ckpt: Path) -> dict[str, Any]:
    n, length, out_len, c, rate = sizes(run.smoke)["moe"]
    out: dict[str, Any] = {}
    for variant, size in (("default", BUDGET), ("chunk2048", 2048), ("chunk1024", 1024)):
        if run.left() < 60:
            run.record(f"moe-{variant}", None, 0, "skipped: budget spent")
            continue
        tag, trace = ("moe", run.out / "trace-moe.json") if variant == "default" else \
            (f"moe-{variant}", run.out / f"trace-moe-{variant}.json")
        srv = launch(run, ckpt, tag, c, c * (int(length * 1.5) + out_len * 2 + 64) + 4096,
                     "--chunked-prefill-size", str(size), env={"DCPCTL_STEP_TRACE": str(trace)})
        res = bench(run, f"{tag}-bench", srv.url, "--requests", str(n), "--input-len", str(length), "--output-len",
                    str(out_len), "--random-range-ratio", "0.5", "--request-rate", str(rate), "--concurrency",
                    str(c), "--seed", "2") if srv.url else None
        stop(run, srv, tag)
        cell = {"chunked_prefill_size": size, "bench": res, "steps": step_profile(trace)}
        if variant == "default":
            out.update(cell)
        else:
            out.setdefault("variants", {})[variant] = cell
    return out


def step_profile(trace: Path) -> dict[str, Any] | None:
    """Where a served run's steps went, from the step trace: per kind and per band of tokens carried, the
    count and the median / max step time (ms), and the loop's time outside steps (take, deliver, idle)."""
    if not trace.exists():
        return None
    doc = json.loads(trace.read_text())
    rows = [dict(zip(doc["fields"], r)) for r in doc["rows"]]
    if not rows:
        return None
    bands: dict[str, list[float]] = {}
    for r in rows:
        t = r["tokens"]
        band = next(f"<={b}" for b in (1, 64, 512, 2048, 4096, 8192, 1 << 62) if t <= b)
        bands.setdefault(f"{r['kind']} {band}", []).append((r["stepped"] - r["step"]) * 1e3)
    stepped = sum(r["stepped"] - r["step"] for r in rows)
    wall = rows[-1]["delivered"] - rows[0]["take"]
    return {"wall_s": wall, "in_steps_s": stepped,
            "bands": {k: {"count": len(v), "median_ms": sorted(v)[len(v) // 2], "max_ms": max(v),
                          "sum_s": sum(v) / 1e3} for k, v in sorted(bands.items())}}


def early(run: Run, ckpt: Path, rounds: int = 2) -> dict[str, Any]:
    """An unrecorded early-stopping run first (a fresh server's first requests pay one-time costs, and the
    fitted run would never meet them), then `rounds` recorded pairs: early, then fitted to what that run
    produced."""
    n, length, max_tokens, c = sizes(run.smoke)["early"]
    srv = launch(run, ckpt, "early", c, c * (length + length // 2))
    common = ["--requests", str(n), "--input-len", str(length), "--concurrency", str(c), "--seed", "3"]
    common += ["--output-len", str(max_tokens)]
    stops = [a for s in STOPS for a in ("--stop", s)]
    res: dict[str, Any] = {}
    pairs: list[tuple[dict | None, dict | None]] = []
    if srv.url:
        bench(run, "early-warmup", srv.url, *common, *stops)
        for r in range(rounds):
            tag = f"-{r + 1}" if r else ""
            got = bench(run, f"early-bench{tag}", srv.url, *common, *stops)
            lens = (got or {}).get("output_lens")
            fitted = bench(run, f"fitted-bench{tag}", srv.url, *common, "--output-lens", ",".join(map(str, lens))) \
                if lens and all(x > 0 for x in lens) else None
            pairs.append((got, fitted))
        res["retracted_total"] = retracted(srv.url)
    stop(run, srv, "early")
    if pairs:
        res["early"], res["fitted"] = pairs[0]
    tput = [tuple((b or {}).get("output_throughput") for b in pair) for pair in pairs]
    res["rounds"] = [{"early_output_throughput": a, "fitted_output_throughput": b} for a, b in tput]
    a, b = [x for x, _ in tput if x], [y for _, y in tput if y]
    res["fitted_vs_early"] = statistics.median(b) / statistics.median(a) if a and b else None
    return res


def dense1k(run: Run, ckpt: Path) -> dict[str, Any]:
    cell = "tiny" if run.smoke else "dense"
    flags = serve_peers.launch_flags()
    serve = serve_peers.serve_part(run, "tiny" if run.smoke else "dense", ckpt, [cell], "graph", flags)
    dec = serve_peers.decode_part(run, "tiny" if run.smoke else "dense", ckpt, [cell])
    doc = {"cells": {cell: serve_peers.CELLS[cell]}, "output_len": serve_peers.output_len(run),
           "checkpoints": {serve_peers.CELLS[cell][0]: {"serve": {"graph": serve}, "decode": dec}}}
    return {"serve": serve, "decode": dec, "summary": serve_report.summarize(doc)["cells"]}


PARTS = {"stall": ("dense", stall), "moe": ("moe", moe), "early": ("dense", early),
         "dense1k": ("dense", dense1k)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--smoke", action="store_true",
                    help="CPU, tiny checkpoints: a check of the script itself")
    ap.add_argument("--cells", default="stall,moe,early,dense1k", help=f"comma list from {sorted(PARTS)}")
    ap.add_argument("--budget-s", type=float, default=540.0, help="parts that would start later are skipped")
    ap.add_argument("--stall-repeats", type=int, default=1,
                    help="rounds of the stall cell's arrivals against its servers, in turn (medians reported)")
    ap.add_argument("--stall-warmup", type=int, default=0,
                    help="unrecorded rounds against each stall server before the recorded ones")
    ap.add_argument("--stall-variants", default=",".join(STALL_VARIANTS),
                    help=f"the stall cell's servers, a comma list from {list(STALL_VARIANTS)}")
    ap.add_argument("--ckpt-dir", type=Path, default=Path("/tmp/dcpctl-mixed-ckpt"))
    args = ap.parse_args(argv)
    cells = args.cells.split(",")
    if bad := [c for c in cells if c not in PARTS]:
        ap.error(f"unknown cells {bad}; valid: {sorted(PARTS)}")
    if bad := [v for v in args.stall_variants.split(",") if v not in STALL_VARIANTS]:
        ap.error(f"unknown stall variants {bad}; valid: {list(STALL_VARIANTS)}")
    run = Run(args.out, args.budget_s, args.smoke)
    doc: dict[str, Any] = {"smoke": args.smoke, "cells": {}}
    ckpts: dict[str, Path] = {}
    for cell in cells:
        name = "tiny" if args.smoke else PARTS[cell][0]
        if run.left() < 60:
            run.record(cell, None, 0, "skipped: budget spent")
            continue
        if name not in ckpts:
            ckpts[name] = serve_peers.write_checkpoint(name, args.ckpt_dir / name, run.device)
        stall_args = (args.stall_repeats, args.stall_warmup, tuple(args.stall_variants.split(",")))
        extra = stall_args if cell == "stall" else ()
        doc["cells"][cell] = PARTS[cell][1](run, ckpts[name], *extra)
        doc["parts"] = run.parts
        (run.out / "mixed.json").write_text(json.dumps(doc, indent=2))
    print(json.dumps(summary(doc), indent=2))


def summary(doc: dict[str, Any]) -> dict[str, Any]:
    """The figures the targets name."""
    c, g, out = doc["cells"], serve_report._get, {}
    for v in STALL_VARIANTS:
        bg = g(c, "stall", v, "bench", "classes", "background") or {}
        out[f"stall_{v}"] = {"background_p99_itl_ms": bg.get("p99_itl_ms"),
                             "background_median_itl_ms": bg.get("median_itl_ms"),
                             "total_token_throughput": g(c, "stall", v, "bench", "total_token_throughput"),
                             "total_token_throughput_median": g(c, "stall", v,
                                                                "total_token_throughput_median"),
                             "rounds": len(g(c, "stall", v, "rounds") or []),
                             "budget_step_ms": g(c, "stall", v, "budget_steps_ms")}
    out["moe"] = {k: g(c, "moe", "bench", k) for k in ("median_itl_ms", "p99_itl_ms", "output_throughput")}
    out["moe"]["steps"] = g(c, "moe", "steps")
    for v in ("chunk2048", "chunk1024"):
        out[f"moe_{v}"] = {k: g(c, "moe", "variants", v, "bench", k)
                           for k in ("median_itl_ms", "p99_itl_ms", "output_throughput", "median_ttft_ms")}
    out["early"] = {"fitted_vs_early": g(c, "early", "fitted_vs_early"),
                    "retracted": g(c, "early", "retracted_total")}
    out["dense1k_served_vs_graph"] = [(r["concurrency"], r["served_vs_graph"]) for r in g(c, "dense1k",
                                                                                          "summary") or []]
    return out


if __name__ == "__main__":
    main()
