"""The decode step's 16-bit GEMMs (y = x @ W^T, few rows): cuBLAS (torch's F.linear) against dcpctl's split-K
Triton kernel (runtime/kernels/gemm16.py) over a grid of tile settings, and the shipped choice (this GPU's
gemm16 tuning table), one process, one GPU.  --save-table FILE writes the gemm16 tuning table the sweep makes:
per shape and row count the best setting where it beat cuBLAS by WIN or more
(dcpctl/tuning/gemm16/device_name=<GPU>.json).

Each setting is timed as `dcpctl bench kernel` times: a CUDA graph of CALLS calls that rotate over weight
copies of >= 256 MiB in all (so no call finds its weight in L2), the median of 10 replays, per call
(`dcpctl.bench.ceilings.graph_ms`).  The Triton kernel is checked against F.linear in fp32 before it is timed.

usage: python3 -m benchmarks.gemm16_sweep [--rows 8,32] [--shapes qkv_a,q_b,o_proj,gate_up,down]
       [--grid first|wide] [-o out.json] [--save-table FILE]
  --grid first: the grid the shipped H200 table came from; wide: narrower tiles, deeper K steps, 8 warps
"""
from __future__ import annotations

import argparse
import itertools
import json

import torch
import torch.nn.functional as F

from dcpctl import tuning
from dcpctl.bench.ceilings import graph_ms
from dcpctl.runtime.kernels import gemm16
from dcpctl.runtime.kernels.gemm16 import Tiles16, choose, linear16

SHAPES = {"qkv_a": (2112, 7168), "q_b": (24576, 1536), "o_proj": (7168, 16384), "gate_up": (4096, 7168),
          "down": (7168, 2048)}   # (N, K) of the served-step checkpoint: V3 attention, dense MLP of 2048, TP
                                  # 1
CALLS = 8
WIN = 0.04      # a setting goes into the table only where it beat cuBLAS by this much (runs differ by a few
                # %)
GRIDS = {"first": ((64, 128), (128, 256), (1, 2, 4), (4,), (3, 4)),     # bn, bk, per_sm, warps, stages
         "wide": ((32, 64), (128, 256, 512), (1,), (4, 8), (3, 4, 5))}


def time_graph(fn, copies: list[torch.Tensor]) -> float:
    """us per call: CALLS calls over rotating weight copies in one CUDA graph (ceilings.graph_ms)."""
    return graph_ms([lambda w=copies[i % len(copies)]: fn(w) for i in range(CALLS)]) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default="8,32")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--grid", choices=tuple(GRIDS), default="first")
    ap.add_argument("-o", "--out")
    ap.add_argument("--save-table", help="write the gemm16 tuning table the sweep makes")
    a = ap.parse_args()
    dev = torch.device("cuda")
    gemm16.configure(True, dev)        # the shipped choice: this GPU's table
    table: dict[str, list] = {}
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    grid = [Tiles16(*g) for g in itertools.product(*GRIDS[a.grid])]
    results = []
    for name in a.shapes.split(","):
        N, K = SHAPES[name]
        nbytes = N * K * 2
        copies = [torch.randn(N, K, device=dev, dtype=torch.bfloat16) * 0.02
                  for _ in range(max(2, -(-(256 << 20) // nbytes)))]
        for R in (int(r) for r in a.rows.split(",")):
            x = torch.randn(R, K, device=dev, dtype=torch.bfloat16)
            want = F.linear(x.float(), copies[0].float())
            cublas = time_graph(lambda w: F.linear(x, w), copies)
            best = None
            for t in grid:
                fn = lambda w, t=t: linear16(x, w, t, sms)  # noqa: E731
                try:
                    got = fn(copies[0]).float()
                    err = float((got - want).norm() / want.norm())
                    if err > 1e-2:
                        print(f"{name} R={R} {t}: rel err {err:.2e}, skipped", flush=True)
                        continue
                    us = time_graph(fn, copies)
                except Exception as e:       # noqa: BLE001 -- a setting that does not compile or fit
                    print(f"{name} R={R} {t}: {type(e).__name__}", flush=True)
                    continue
                row = dict(shape=name, N=N, K=K, rows=R, bn=t.bn, bk=t.bk, per_sm=t.per_sm, warps=t.warps,
                           stages=t.stages, us=round(us, 2), cublas_us=round(cublas, 2),
                           floor_us=round(nbytes / 4.2e6, 2))
                results.append(row)
                if best is None or us < best["us"]:
                    best = row
            if best is not None and best["us"] <= (1 - WIN) * cublas:
                t = Tiles16(best["bn"], best["bk"], best["per_sm"], best["warps"], best["stages"])
                table.setdefault(f"{N},{K}", []).append([R, {k: v for k, v in vars(t).items()
                                                             if v != getattr(Tiles16(), k)}])
            shipped = choose(N, K, R)
            ship_us = time_graph(lambda w: linear16(x, w, shipped, sms), copies) if shipped else cublas
            results.append(dict(shape=name, N=N, K=K, rows=R, shipped=str(shipped or "cuBLAS"),
                                us=round(ship_us, 2), cublas_us=round(cublas, 2)))
            print(f"{name:8s} R={R:3d}  cuBLAS {cublas:7.2f} us  shipped {ship_us:7.2f} us  best Triton "
                  f"{best['us'] if best else float('nan'):7.2f} us "
                  f"{(best['bn'], best['bk'], best['per_sm'], best['warps'], best['stages']) if best else ''}"
                  f"  copy-bw floor {nbytes / 4.2e6:6.2f} us", flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(dev), "results": results}, f, indent=1)
    if a.save_table:
        major, minor = torch.cuda.get_device_capability(dev)
        tuning.write(a.save_table, "gemm16", torch.cuda.get_device_name(dev), major * 10 + minor,
                     "python -m benchmarks.gemm16_sweep --save-table FILE", tuning.source_commit(),
                     {k: sorted(v) for k, v in table.items()})


if __name__ == "__main__":
    main()
