"""One `bench kernel` cell of FlashMLA, timed several ways in one process (why 128 heads at long context
and batch fall short of 0.84 of roofline while shorter cells reach it).

    python -m benchmarks.flashmla.cell_probe [--heads 128] [--ctx 131072] [--batch 32] [--json OUT]
                                             [--once KIND]

Kinds, each timed three times interleaved (CUDA-graph replays of one table: unlike bench kernel, no rotation
over page sets, so a cell much smaller than L2 is timed from L2): `random` (pages drawn from a pool as big as
bench kernel's largest cell, as bench kernel does), `random_tight` (a random order of just the cell's pages),
`sequential` (the cell's pages in order), and `halves` (two launches of half the heads over the random table:
what reading the KV once per 64-head block costs).  Roofline as bench kernel: max(bytes / copy bandwidth,
flops / bf16 matmul rate), both measured here.  --once KIND runs one call of that kind (for ncu).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys

import torch

from dcpctl.bench.ceilings import measure, rotation_us
from dcpctl.runtime.attention import flashmla

R, V, PAGE = 576, 512, 64
BIG_TOKENS = 131072 * 64      # bench kernel's pool: its largest cell (128K x 64)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--heads", type=int, default=128)
    ap.add_argument("--ctx", type=int, default=131072)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--json")
    ap.add_argument("--once", choices=["random", "random_tight", "sequential", "halves"])
    a = ap.parse_args()
    mod, why = flashmla.load()
    if mod is None:
        print(f"cell_probe: FlashMLA not available: {why}", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    per = a.batch * math.ceil(a.ctx / PAGE)
    pages = max(per, BIG_TOKENS // PAGE)
    kv = torch.randn(pages, PAGE, R, device=dev, dtype=torch.bfloat16)
    scale = 1 / math.sqrt(192)
    tables = {"random": torch.randperm(pages, device=dev)[:per].int().view(a.batch, -1),
              "random_tight": torch.randperm(per, device=dev).int().view(a.batch, -1),
              "sequential": torch.arange(per, device=dev, dtype=torch.int32).view(a.batch, -1)}
    q = torch.randn(a.batch, a.heads, R, device=dev, dtype=torch.bfloat16)
    lens = torch.full((a.batch,), a.ctx, dtype=torch.int32, device=dev)
    rows = flashmla.decode_rows(lens, a.heads)
    half = a.heads // 2
    rows_half = flashmla.decode_rows(lens, half)
    qa, qb = q[:, :half].contiguous(), q[:, half:].contiguous()

    def fn(kind):
        if kind == "halves":
            t = tables["random"]
            return lambda: (flashmla.run(qa, kv, t, rows_half, scale, V),
                            flashmla.run(qb, kv, t, rows_half, scale, V))
        t = tables[kind]
        return lambda: flashmla.run(q, kv, t, rows, scale, V)
    if a.once:
        fn(a.once)()
        torch.cuda.synchronize()
        return 0
    ceil = measure(dev)
    nbytes = a.batch * a.ctx * R * 2 + a.batch * a.heads * (R + V) * 2
    flops = 2 * a.batch * a.heads * a.ctx * (R + V)
    roof_us = ceil.roofline_s(nbytes, flops) * 1e6
    times: dict[str, list[float]] = {k: [] for k in ("random", "random_tight", "sequential", "halves")}
    for _ in range(3):
        for k in times:
            times[k].append(rotation_us([fn(k)])[0])
    out = {"heads": a.heads, "ctx": a.ctx, "batch": a.batch, "copy_tbps": ceil.copy_bytes_per_s / 1e12,
           "bf16_tflops": ceil.bf16_flops_per_s / 1e12,
           "roofline_us": roof_us, "kv_bytes": nbytes, "us": times,
           "fraction": {k: roof_us / statistics.median(v) for k, v in times.items()},
           "kv_read_tbps_if_once": {k: nbytes / statistics.median(v) / 1e6 for k, v in times.items()}}
    print(json.dumps(out, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
