"""Block-FP8 GEMM vs the bf16 GEMM of the same shape at decode batch sizes, against the weight-read roofline.

    python benchmarks/fp8_gemm.py [--json OUT] [--hbm-tbps 4.2] [--sweep] [--budget-s 150]

Shapes: DeepSeek-V3's projections (TP 1 and TP 8 slices), one routed expert, and the gate and up
projections concatenated (what a fused gate/up weight would read). Each timing is a CUDA graph of 20
back-to-back calls that rotate over enough weight copies (> 2x the 50 MB L2) that every call reads its
weight from HBM; the graph is replayed 20 times and the median per call is reported, so launch latency
is amortized the way a captured decode step sees it (kernel after kernel, no host in between).
Roofline: (weight bytes + scale bytes + activation and output bytes) / HBM bandwidth.
Every cell times, in the same process: `before` (fp8_gemm.BEFORE_TILES: a quantization launch, then the
GEMM), `after` (the shipped choice, fp8_gemm.choose_tiles) and cuBLAS bf16. --sweep also times every
CANDIDATES setting and reports the best; `--table` prints the fp8_gemm.TABLE those bests make.
Errors (M = 8, one cell per shape): the kernel against float64 math on the same quantized operands, the
1x128 e4m3 activation quantization itself (float64, quantized vs not), and bf16 F.linear on the
dequantized weight against float64.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from dcpctl.runtime.models.fp8_gemm import BEFORE_TILES, Tiles, choose_tiles, fp8_matmul, quantize_rows

SHAPES = {  # name: (N, K)
    "q_a_proj": (1536, 7168), "kv_a_proj": (576, 7168), "q_b_proj": (24576, 1536), "o_proj": (7168, 16384),
    "o_proj/tp8": (7168, 2048), "dense_gate/tp8": (2304, 7168), "dense_gate_up/tp8": (4608, 7168),
    "expert_gate": (2048, 7168), "expert_gate_up": (4096, 7168), "expert_down": (7168, 2048),
}
BATCHES = (1, 8, 32, 64)
CALLS, REPLAYS = 20, 20
L2_BYTES = 50 * 2**20
# N tiles of 32 (SGLang's H200 table for N=576, K=7168), 64 and 128, with 1-4 programs per SM from K splits;
# the swapped MMA only where the weight rows fill its M side (>= 64); the quantization fused into the GEMM
# with the swapped MMA (the one pairing that won in the first H200 sweep); early launch (pdl) for a few. In
# this benchmark a pdl GEMM follows another GEMM that lets it start early; in a decode step the kernel
# before is often a torch one, which does not, so pdl gains here are an upper bound
CANDIDATES = ([Tiles(32, 4, 4, ps) for ps in (1, 2, 4)]
              + [Tiles(64, 4, 3, ps, swap=sw) for ps in (1, 2, 4) for sw in (False, True)]
              + [Tiles(128, 4, 4, ps, swap=sw) for ps in (1, 2) for sw in (False, True)]
              + [Tiles(64, 4, 3, ps, fuse_rows=64, swap=True) for ps in (1, 2)]
              + [Tiles(64, 4, 3, ps, swap=sw, pdl=True) for ps, sw in ((1, False), (2, False), (2, True))]
              + [Tiles(stages=5, per_sm=1)])


def _graph_time(fn, copies: int) -> float:
    # seconds per call: CALLS calls in one graph (weight copy i % copies), median of REPLAYS replays
    for i in range(3):
        fn(i % copies)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(CALLS):
            fn(i % copies)
    times = []
    for _ in range(REPLAYS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / 1e3 / CALLS)
    return statistics.median(times)


def errors(x: torch.Tensor, w8: torch.Tensor, s: torch.Tensor) -> dict:
    """Max-abs and norm errors relative to the float64 product of x and the dequantized weight."""
    w = (w8.double() * s.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:w8.shape[0], :w8.shape[1]])
    x8, xs = quantize_rows(x, 128)
    xq = x8.double() * xs.double().repeat_interleave(128, 1)[:, :x.shape[1]]
    exact, quant = x.double() @ w.T, xq @ w.T
    kernel, bf16 = fp8_matmul(x, w8, s, (128, 128)).double(), F.linear(x, w.to(torch.bfloat16)).double()

    def rel(a, b):
        return {"max": round(((a - b).abs().max() / b.abs().max()).item(), 5),
                "norm": round(((a - b).norm() / b.norm()).item(), 5)}
    return {"kernel_vs_same_quantized_f64": rel(kernel, quant), "activation_quantization_f64": rel(quant, exact),
            "fp8_kernel_vs_exact_f64": rel(kernel, exact), "bf16_vs_exact_f64": rel(bf16, exact)}


def cell(name: str, N: int, K: int, M: int, hbm: float, cands: list[Tiles]) -> dict:
    w_bytes = N * K
    copies = max(2, -(-2 * L2_BYTES // w_bytes))
    w8 = [torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn) for _ in range(copies)]
    s = [torch.rand(-(-N // 128), -(-K // 128), device="cuda") * 1e-2 + 1e-3 for _ in range(copies)]
    wb = [w.to(torch.bfloat16) for w in w8[:max(2, -(-2 * L2_BYTES // (2 * w_bytes)))]]
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)

    def fp8(t):
        return _graph_time(lambda i: fp8_matmul(x, w8[i], s[i], (128, 128), tiles=t), copies)
    after_tiles = choose_tiles(N, K, M)
    before, after = fp8(BEFORE_TILES), fp8(after_tiles)
    bf16 = _graph_time(lambda i: F.linear(x, wb[i % len(wb)]), len(wb))
    roof = (w_bytes + s[0].numel() * 4 + 2 * M * (K + N)) / (hbm * 1e12)
    row = {"shape": name, "N": N, "K": K, "M": M, "before_us": round(before * 1e6, 2), "after_us": round(after * 1e6, 2),
           "bf16_us": round(bf16 * 1e6, 2), "roofline_us": round(roof * 1e6, 2),
           "after_vs_before": round(before / after, 3), "bf16_over_after": round(bf16 / after, 3),
           "after_over_roofline": round(after / roof, 3), "bf16_over_roofline": round(bf16 / roof, 3),
           "after_tiles": vars(after_tiles)}
    failed = []

    def trial(t):
        try:
            return fp8(t)
        except Exception as e:  # noqa: BLE001 - a candidate that does not run here is reported, not fatal
            failed.append(f"{t}: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}")
            return float("inf")
    if cands:
        timed = sorted(((trial(t), i) for i, t in enumerate(cands)), key=lambda p: p[0])
        best, i = timed[0]
        row.update(best_us=round(best * 1e6, 2), best_tiles=vars(cands[i]), best_over_roofline=round(best / roof, 3),
                   bf16_over_best=round(bf16 / best, 3))
        if failed:
            row["failed"] = failed
    if M == 8:
        row["errors"] = errors(x, w8[0], s[0])
    return row


def table(rows: list[dict]) -> str:
    """The fp8_gemm.TABLE literal of the sweep's best setting per shape and row count."""
    by: dict = {}
    for r in rows:
        if "best_tiles" in r:
            by.setdefault((r["N"], r["K"]), []).append((r["M"], Tiles(**r["best_tiles"])))
    return "TABLE = {\n" + "".join(f"    {k}: {tuple(v)},\n" for k, v in sorted(by.items())) + "}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--hbm-tbps", type=float, default=4.2, help="HBM bandwidth for the roofline (measured copy)")
    ap.add_argument("--sweep", action="store_true", help="also time every CANDIDATES setting per cell")
    ap.add_argument("--budget-s", type=float, default=150.0, help="stop sweeping (before/after only) past this")
    ap.add_argument("--table", action="store_true", help="print the TABLE the sweep's bests make")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("fp8_gemm.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    rows, t0 = [], time.perf_counter()
    print(f"{'shape':18} {'M':>3} {'before':>7} {'after':>7} {'bf16':>7} {'roof':>6} {'x bf16':>6} {'/roof':>6}  (us)")
    for name, (N, K) in SHAPES.items():
        for M in BATCHES:
            sweep = args.sweep and time.perf_counter() - t0 < args.budget_s
            r = cell(name, N, K, M, args.hbm_tbps, CANDIDATES if sweep else [])
            rows.append(r)
            print(f"{name:18} {M:>3} {r['before_us']:>7} {r['after_us']:>7} {r['bf16_us']:>7} {r['roofline_us']:>6} "
                  f"{r['bf16_over_after']:>6} {r['after_over_roofline']:>6}"
                  + (f"  best {r['best_us']} {r['best_tiles']}" if "best_us" in r else ""), flush=True)
            for f in r.get("failed", []):
                print(f"  failed: {f}", flush=True)
            if "errors" in r:
                print(f"  errors at M=8: {r['errors']}", flush=True)
    print(f"{time.perf_counter() - t0:.0f} s")
    if args.table:
        print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "before_tiles": vars(BEFORE_TILES), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
