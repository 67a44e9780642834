"""Which method each block-FP8 GEMM should run, by shape and row count: measured, written as the fp8_gemm
table's `methods` section (fp8_tiles.method and per_expert read it under --fp8-gemm auto).

    python -m benchmarks.fp8_methods [--rows 1 2 ... 8192] [--tokens 8 ... 1024] [--experts 16] [--top-k 8]
                                     [--budget-s 300] [--json OUT] [--save-table FILE] [--merge-table FILE]

Dense GEMMs (the V3-shaped serving checkpoint's at TP 1: attention's projections, the dense layer's MLP, the
shared and routed experts' shapes) at each row count, every method timed in CUDA graphs:
- `w8a16`: the Triton kernel with 16-bit activations (fp8_tiles.choose_tiles, the shipped setting);
- `w8a8`: the Triton kernel with e4m3 activations (its shipped setting);
- `cublas`: the rows quantized 1x128 (one launch) and cuBLAS's block-scaled FP8 GEMM (fp8_cublas.py);
- beside them `bf16`: cuBLAS on the dequantized weight (F.linear), the bf16 twin's GEMM.
The table keeps, per shape, the fastest method at each measured row count (at decode's rows, up to
fp8_parts.PREFILL_ROWS, w8a16 unless another is MARGIN faster: the same weights read, its 16-bit activations
cost no accuracy); the last bound reaches every larger count.

The routed experts' grouped GEMMs (`--experts` experts, top `--top-k`, a new random routing each call) at each
token count: the grouped Triton kernel under w8a16 and under w8a8 (its shipped setting and the GROUPED_TILES
settings; the fastest goes into the table's `grouped` section at those rows per expert), against
`per_expert`: the MoE's loop, one dense GEMM per expert through its own method (the group ends read back to
the host first: what the MoE does, timed with the sync), and bf16 torch._grouped_mm. gate+up and down are
decided together (the MoE runs both one way), by rows per expert; per_expert never goes into a CUDA graph
(mlp_graphs caps its pieces below it).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from benchmarks.fp8_gemm import GROUPED, SHAPES, _experts, merge
from dcpctl.runtime.kernels import fp8_cublas
from dcpctl.runtime.kernels.fp8_dequant import dequantize_gpu
from dcpctl.runtime.kernels.fp8_gemm import fp8_matmul
from dcpctl.runtime.kernels.fp8_parts import PREFILL_ROWS
from dcpctl.runtime.kernels.fp8_tiles import DEFAULT_TILES, Tiles, choose_tiles

DENSE = ("q_a+kv_a_proj", "q_b_proj", "o_proj", "dense_gate_up", "dense_down", "expert_gate_up", "o_proj/tp8")
ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
TOKENS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
GROUPED_TILES = [DEFAULT_TILES, Tiles(bm=64, bn=128, warps=4, stages=4),
                   Tiles(bm=64, bn=128, warps=4, stages=3),
                   Tiles(bm=128, bn=128, warps=8, stages=3), Tiles(bm=128, bn=128, warps=8, stages=4)]
MARGIN = 0.05
TARGET_US = 400.0   # a graph holds about this much work (at least 1, at most 20 calls)


def _time(fn, graph: bool = True) -> float:
    """Microseconds per fn() call: in a CUDA graph of enough calls, median of 5 replays; graph=False times
    eager calls (a host sync inside)."""
    fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    fn()
    b.record()
    torch.cuda.synchronize()
    calls = max(1, min(20, int(TARGET_US / max(a.elapsed_time(b) * 1e3, 1.0))))
    if graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(calls):
                fn()
        run = g.replay
    else:
        def run():
            for _ in range(calls):
                fn()
    times = []
    for _ in range(5):
        a.record()
        run()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / calls)
    return round(statistics.median(times), 2)


def _weights(N: int, K: int) -> tuple:
    # (e4m3 weight, its factors, the bf16 weight the loader would dequantize it to)
    w8, s, _ = _experts(N, K, 1)
    return w8[0], s[0], dequantize_gpu(w8[0], s[0], (128, 128), torch.bfloat16)


def dense_cell(name: str, N: int, K: int, R: int) -> dict:
    w8, s, w = _weights(N, K)
    x = torch.randn(R, K, device="cuda", dtype=torch.bfloat16)
    dev = x.device
    us = {"bf16": _time(lambda: F.linear(x, w))}
    for m, a16 in (("w8a16", True), ("w8a8", False)):
        t = choose_tiles(N, K, R, 1, a16, R, device=dev)
        us[m] = _time(lambda: fp8_matmul(x, w8, s, (128, 128), tiles=t, mode=m))
    if fp8_cublas.usable(N, K, (128, 128), dev):
        us["cublas"] = _time(lambda: fp8_cublas.cublas_matmul(x, w8, s))
    return {"shape": name, "N": N, "K": K, "rows": R, "us": us}


def grouped_cell(N: int, K: int, tokens: int, experts: int, top_k: int) -> dict:
    w8, s, wb = _experts(N, K, experts)
    g = torch.Generator(device="cuda").manual_seed(tokens)
    idx = torch.rand(tokens, experts, device="cuda", generator=g).topk(top_k, dim=-1).indices.reshape(-1)
    ends = torch.bincount(idx, minlength=experts).cumsum(0).to(torch.int32)
    x = torch.randn(tokens * top_k, K, device="cuda", dtype=torch.bfloat16, generator=g)
    rows = max(1, tokens * top_k // experts)
    us = {"bf16": _time(lambda: torch._grouped_mm(x, wb.transpose(1, 2), offs=ends))}
    t16 = choose_tiles(N, K, rows, experts, True, tokens * top_k, device=x.device)
    us["w8a16"] = _time(lambda: fp8_matmul(x, w8, s, (128, 128), ends=ends, tiles=t16, mode="w8a16"))
    w8a8 = {}
    shipped = choose_tiles(N, K, rows, experts, False, tokens * top_k, device=x.device)
    cands = list(dict.fromkeys([shipped, *GROUPED_TILES]))
    for t in cands:
        w8a8[json.dumps(vars(t))] = _time(lambda: fp8_matmul(x, w8, s, (128, 128), ends=ends, tiles=t,
                                                            mode="w8a8"))
    best = min(w8a8, key=w8a8.get)
    us["w8a8"] = w8a8[best]

    def loop():
        start = 0
        for j, end in enumerate(ends.tolist()):   # the MoE's host sync
            if end > start:
                fp8_matmul(x[start:end], w8[j], s[j], (128, 128), mode="auto")
            start = end
    us["per_expert"] = _time(loop, graph=False)
    return {"N": N, "K": K, "tokens": tokens, "rows_per_expert": rows, "experts": experts, "top_k": top_k,
            "us": us, "w8a8_tiles": w8a8, "w8a8_best_tiles": json.loads(best)}


def _bounds(points: list[tuple[int, str]]) -> list[list]:
    """[(rows, winner)] ascending -> [[most rows, winner], ...] runs merged, the last reaching every count."""
    out: list[list] = []
    for r, v in points:
        if out and out[-1][1] == v:
            out[-1][0] = r
        else:
            out.append([r, v])
    if out:
        out[-1][0] = 1 << 30
    return out


def dense_winner(us: dict, rows: int) -> str:
    fp8 = {m: v for m, v in us.items() if m != "bf16"}
    best = min(fp8, key=fp8.get)
    if rows <= PREFILL_ROWS and best != "w8a16" and fp8[best] > fp8["w8a16"] * (1 - MARGIN):
        return "w8a16"
    return best


def table(dense: list[dict], grouped: list[dict]) -> dict:
    methods = {"dense": {}, "grouped": {}}
    for name in dict.fromkeys(r["shape"] for r in dense):
        cells = sorted((r for r in dense if r["shape"] == name), key=lambda r: r["rows"])
        key = f"{cells[0]['N']},{cells[0]['K']}"
        methods["dense"][key] = _bounds([(r["rows"], dense_winner(r["us"], r["rows"])) for r in cells])
    by_tokens: dict[int, list[dict]] = {}
    for r in grouped:
        by_tokens.setdefault(r["tokens"], []).append(r)
    points, tiles = [], {}
    for tok in sorted(by_tokens):
        pair = by_tokens[tok]
        total = {m: sum(r["us"][m] for r in pair) for m in ("w8a16", "w8a8", "per_expert")}
        win = min(total, key=total.get)
        rows = pair[0]["rows_per_expert"]
        if rows <= PREFILL_ROWS and win != "w8a16" and total[win] > total["w8a16"] * (1 - MARGIN):
            win = "w8a16"
        points.append((rows, win))
        for r in pair:   # the w8a8 setting that ran fastest at these rows (what the methods above timed)
            tiles.setdefault(f"{r['N']},{r['K']}", []).append([rows, r["w8a8_best_tiles"]])
    for N, K in GROUPED.values():
        methods["grouped"][f"{N},{K}"] = _bounds(points)
    out = {"methods": methods}
    if tiles:   # w8a8's settings by rows per expert, the last reaching every larger count
        out["grouped"] = {k: _bounds([(r, json.dumps(t)) for r, t in v]) for k, v in tiles.items()}
        out["grouped"] = {k: [[r, json.loads(t)] for r, t in v] for k, v in out["grouped"].items()}
    return out


def merge_table(data: dict, command: str, path: str) -> tuple[dict, str]:
    """data over the fp8_gemm table at path: the methods of shapes this run did not time kept (per section),
    every other section as fp8_gemm.py's --merge-table keeps it."""
    from dcpctl import tuning
    old = tuning.read(path)["data"].get("methods", {})
    methods = {sec: {**old.get(sec, {}), **data["methods"].get(sec, {})} for sec in ("dense", "grouped")}
    out, command = merge({k: v for k, v in data.items() if k != "methods"}, command, path)
    return {**out, "methods": methods}, command


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="*", default=list(ROWS),
                    help="dense GEMMs' row counts (none: skip)")
    ap.add_argument("--tokens", type=int, nargs="*", default=list(TOKENS),
                    help="the grouped GEMMs' token counts (none: skip)")
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--budget-s", type=float, default=300.0, help="stop timing new cells past this")
    ap.add_argument("--json", help="every timing")
    ap.add_argument("--save-table", help="write the fp8_gemm table (the methods section) here")
    ap.add_argument("--merge-table",
                    help="an fp8_gemm table whose other sections and shapes the saved one keeps")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("fp8_methods.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda", 0)
    ok, why = fp8_cublas.probe(str(dev))
    print(f"cuBLAS block-scaled FP8: {why}", flush=True)
    t0, dense, grouped, skipped = time.time(), [], [], []
    for name in DENSE:
        N, K = SHAPES[name]
        for R in args.rows:
            if time.time() - t0 > args.budget_s:
                skipped.append(f"{name} {R}")
                continue
            r = dense_cell(name, N, K, R)
            dense.append(r)
            print(f"{name:16} {R:>5} rows  " + "  ".join(f"{m} {v}" for m, v in r["us"].items()), flush=True)
            torch.cuda.empty_cache()
    for tok in args.tokens:
        for name, (N, K) in GROUPED.items():
            if time.time() - t0 > args.budget_s:
                skipped.append(f"{name} {tok} tokens")
                continue
            r = grouped_cell(N, K, tok, args.experts, args.top_k)
            grouped.append(r)
            print(f"{name:16} {tok:>5} tokens ({r['rows_per_expert']}/expert)  "
                  + "  ".join(f"{m} {v}" for m, v in r["us"].items()), flush=True)
            torch.cuda.empty_cache()
    complete = [r for r in grouped if sum(x["tokens"] == r["tokens"] for x in grouped) == len(GROUPED)]
    data = table(dense, complete)
    command = "python -m benchmarks.fp8_methods " + " ".join(sys.argv[1:])
    report = {"command": command, "device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
              "cublas": why, "dense": dense, "grouped": grouped, "skipped": skipped, "table": data}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    if args.save_table:
        from dcpctl import tuning
        if args.merge_table:
            data, command = merge_table(data, command, args.merge_table)
        sm = torch.cuda.get_device_capability(dev)
        tuning.write(args.save_table, "fp8_gemm", torch.cuda.get_device_name(dev), sm[0] * 10 + sm[1],
                     command, tuning.source_commit(), data)
    print(json.dumps(data["methods"], indent=1))
    if skipped:
        print(f"past --budget-s: {len(skipped)} cell(s) not timed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
