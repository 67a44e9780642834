"""Decode GEMMs by row count on one GPU: us per F.linear for M = 1..64 rows of each bf16 linear of the issue-17
step (DeepSeek-V3 attention at TP 1, a dense MLP of 2048: step_gemms.LINEARS, plus the lm_head of vocab 264) and of
V3's TP-8 attention shards, and for each M the row count it is fastest at when padded up.

Why: cuBLAS(Lt) picks its kernel by M, and the choice is not monotonic (eleventh session, h200_step_gemms_s11.json:
o_proj 64.9 us at 8 rows, 58.7 at 32).  The twelfth session timed padding o_proj's rows in the step and found no
gain there (docs/benchmarks-serve.md), so no padding ships; this sweep is how to look again.  Each cell is timed
as step_gemms.py times its GEMMs (its _time: calls captured in one CUDA graph over its _copies, weight copies
larger than L2), with the BLAS library the loader sets (models/blas.py).  The twelfth session's data
(h200_gemm_rows_sweep_s12.json) came from this script's first version, which had its own timer: 20 calls a graph,
10 replays, copies past 120 MB.

usage: PYTHONPATH=. python3 benchmarks/gemm_rows_sweep.py [-o out.json] [--rows 1,2,...] [--gain 0.03]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from step_gemms import LINEARS, _copies, _time  # noqa: E402

SHAPES = {   # name: (N out, K in)
    **{k: LINEARS[k] for k in ("qkv_a", "q_b", "o_proj", "gate_up", "down")}, "lm_head": (264, 7168),
    "q_b/tp8": (3072, 1536), "o_proj/tp8": (7168, 2048),
}
ROWS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64)


def time_linear(n: int, k: int, m: int) -> float:
    import torch
    import torch.nn.functional as F
    ws = _copies((n, k))
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    return _time(lambda i: F.linear(x, ws[i % len(ws)]), len(ws))


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
