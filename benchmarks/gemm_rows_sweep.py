"""Decode GEMMs by row count on one GPU: us per F.linear for M = 1..64 rows of each bf16 linear of the issue-17
step (DeepSeek-V3 attention at TP 1, a dense MLP of 2048, vocab 264) and of V3's TP-8 attention shards, and for
each M the row count it is fastest at when padded up.

Why: cuBLAS(Lt) picks its kernel by M, and the choice is not monotonic (eleventh session, h200_step_gemms_s11.json:
o_proj 64.9 us at 8 rows, 58.7 at 32).  The twelfth session timed padding o_proj's rows in the step and found no
gain there (docs/benchmarks-serve.md), so no padding ships; this sweep is how to look again.  Each cell is timed as 20
calls in one CUDA graph over weight copies larger than L2, with the BLAS library the loader sets (models/blas.py).

usage: PYTHONPATH=. python3 benchmarks/gemm_rows_sweep.py [-o out.json] [--rows 1,2,...] [--gain 0.03]
"""
from __future__ import annotations

import argparse
import json

SHAPES = {   # name: (N out, K in)
    "qkv_a": (2112, 7168), "q_b": (24576, 1536), "o_proj": (7168, 16384), "gate_up": (4096, 7168),
    "down": (7168, 2048), "lm_head": (264, 7168),
    "q_b/tp8": (3072, 1536), "o_proj/tp8": (7168, 2048),
}
ROWS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64)


def time_linear(n: int, k: int, m: int, calls: int = 20) -> float:
    import torch
    import torch.nn.functional as F
    copies = max(2, -(-120 * 2 ** 20 // (n * k * 2)))          # > L2 (50 MB) between two reads of one copy
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(copies)]
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    for w in ws[:2]:
        F.linear(x, w)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(calls):
            F.linear(x, ws[i % copies])
    for _ in range(3):
        g.replay()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(10):
        g.replay()
    e1.record()
    torch.cuda.synchronize()
    return e0.elapsed_time(e1) * 1e3 / (10 * calls)


def best_padding(times: dict[int, float], gain: float) -> dict[int, int]:
    """For each M, the fastest M' > M among those timed at least `gain` faster than M (M itself when none is)."""
    out = {}
    for m, t in times.items():
        cands = [(times[p], p) for p in times if p > m and times[p] < t * (1 - gain)]
        out[m] = min(cands)[1] if cands else m
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--out")
    ap.add_argument("--rows", default=",".join(map(str, ROWS)))
    ap.add_argument("--gain", type=float, default=0.03, help="least speed-up that counts as faster (default 3%%)")
    a = ap.parse_args()
    import torch

    from dcpctl.runtime.models.blas import choose_blas
    choose_blas("cuda")
    rows = [int(r) for r in a.rows.split(",")]
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "blas": str(torch.backends.cuda.preferred_blas_library()), "shapes": {}}
    for name, (n, k) in SHAPES.items():
        times = {m: time_linear(n, k, m) for m in rows}
        pad = best_padding(times, a.gain)
        doc["shapes"][name] = {"n": n, "k": k, "us": times, "pad_to": pad}
        print(f"{name:>11} N={n:<5} K={k:<5} " + "  ".join(
            f"{m}:{t:.1f}" + (f"->{pad[m]}" if pad[m] != m else "") for m, t in times.items()), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
