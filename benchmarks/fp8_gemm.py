"""Block-FP8 GEMM vs the bf16 GEMM of the same shape at decode batch sizes, against the weight-read roofline.

    python benchmarks/fp8_gemm.py [--json OUT] [--hbm-tbps 4.2] [--sweep]

Shapes: DeepSeek-V3's projections (TP 1 and TP 8 slices) and one routed expert. Each timing is a CUDA
graph of 20 back-to-back calls that rotate over enough weight copies (> 2x the 50 MB L2) that every call
reads its weight from HBM; the graph is replayed 20 times and the median per call is reported.
Roofline: (weight bytes + scale bytes + activation and output bytes) / HBM bandwidth. The peer at the
same shape: torch's blockwise scaled_mm (cuBLAS, 1x128 x 128x128 scales) where this torch build has it.
--sweep also times every Tiles candidate (N tile, warps, stages, programs per SM) per cell and reports
the best next to the default.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F

import itertools

from dcpctl.runtime.models.fp8_gemm import DEFAULT_TILES, Tiles, fp8_matmul

SHAPES = {  # name: (N, K)
    "q_a_proj": (1536, 7168), "kv_a_proj": (576, 7168), "q_b_proj": (24576, 1536), "o_proj": (7168, 16384),
    "o_proj/tp8": (7168, 2048), "dense_gate/tp8": (2304, 7168), "expert_gate": (2048, 7168),
    "expert_down": (7168, 2048),
}
BATCHES = (1, 8, 32, 64)
CALLS, REPLAYS = 20, 20
L2_BYTES = 50 * 2**20


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


def _scaled_mm_peer(x: torch.Tensor, w8: torch.Tensor, s: torch.Tensor):
    """torch's blockwise scaled_mm, or None and why where this build or GPU refuses it."""
    try:
        from torch.nn.functional import ScalingType, scaled_mm
        from dcpctl.runtime.models.fp8_gemm import quantize_rows
    except ImportError as e:
        return None, str(e)
    x8, xs = quantize_rows(x, 128)
    why = ""
    for scales in (xs.t().contiguous().t(), xs, xs.t().contiguous()):
        def call(sa=scales):
            return scaled_mm(x8, w8.t(), sa, ScalingType.BlockWise1x128, s, ScalingType.BlockWise128x128,
                             output_dtype=torch.bfloat16)
        try:
            return call, call()
        except Exception as e:  # noqa: BLE001 - a refusing peer is reported, not fatal
            why = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
    return None, why


CANDIDATES = [Tiles(bn, w, st, ps) for bn, w, st, ps in itertools.product((64, 128), (4, 8), (3, 5), (1, 2, 4))]


def cell(name: str, N: int, K: int, M: int, hbm: float, sweep: bool) -> dict:
    w_bytes = N * K
    copies = max(2, -(-2 * L2_BYTES // w_bytes))
    w8 = [torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn) for _ in range(copies)]
    s = [torch.rand(-(-N // 128), -(-K // 128), device="cuda") + 0.5 for _ in range(copies)]
    wb = [w.to(torch.bfloat16) for w in w8[:max(2, -(-2 * L2_BYTES // (2 * w_bytes)))]]
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    fp8 = _graph_time(lambda i: fp8_matmul(x, w8[i], s[i], (128, 128)), copies)
    best = None
    if sweep:
        timed = [(_graph_time(lambda i: fp8_matmul(x, w8[i], s[i], (128, 128), tiles=t), copies), t)
                 for t in CANDIDATES]
        best = min(timed, key=lambda p: p[0])
    bf16 = _graph_time(lambda i: F.linear(x, wb[i % len(wb)]), len(wb))
    moved = w_bytes + s[0].numel() * 4 + 2 * M * (K + N)
    roof = moved / (hbm * 1e12)
    row = {"shape": name, "N": N, "K": K, "M": M, "fp8_us": round(fp8 * 1e6, 2), "bf16_us": round(bf16 * 1e6, 2),
           "speedup_vs_bf16": round(bf16 / fp8, 3), "roofline_us": round(roof * 1e6, 2),
           "fp8_over_roofline": round(fp8 / roof, 3), "tiles": vars(DEFAULT_TILES)}
    if best is not None:
        row.update(best_us=round(best[0] * 1e6, 2), best_tiles=vars(best[1]), best_over_roofline=round(best[0] / roof, 3))
    peer, info = _scaled_mm_peer(x, w8[0], s[0])
    if peer is not None:
        ref = fp8_matmul(x, w8[0], s[0], (128, 128)).float()
        row["scaled_mm_rel_err"] = round(((info.float() - ref).abs().max() / ref.abs().max()).item(), 5)
        row["scaled_mm_us"] = round(_graph_time(lambda i: peer(), 1) * 1e6, 2)
    else:
        row["scaled_mm"] = info
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--hbm-tbps", type=float, default=4.2, help="HBM bandwidth for the roofline (measured copy)")
    ap.add_argument("--sweep", action="store_true", help="also time every tile candidate per cell")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("fp8_gemm.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    rows = []
    print(f"{'shape':16} {'M':>3} {'fp8 us':>8} {'bf16 us':>8} {'x bf16':>7} {'roof us':>8} {'/roof':>6} {'cuBLAS':>8}")
    for name, (N, K) in SHAPES.items():
        for M in BATCHES:
            r = cell(name, N, K, M, args.hbm_tbps, args.sweep)
            rows.append(r)
            print(f"{name:16} {M:>3} {r['fp8_us']:>8} {r['bf16_us']:>8} {r['speedup_vs_bf16']:>7} "
                  f"{r['roofline_us']:>8} {r['fp8_over_roofline']:>6} {r.get('scaled_mm_us', '-'):>8}"
                  + (f"  best {r['best_us']} us {r['best_tiles']}" if "best_us" in r else ""), flush=True)
    if "scaled_mm" in rows[0]:
        print(f"torch blockwise scaled_mm: {rows[0]['scaled_mm']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
