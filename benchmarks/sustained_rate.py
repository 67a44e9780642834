"""Burst vs sustained: how a compute-bound kernel's time changes as the GPU stays busy.

    python -m benchmarks.sustained_rate [--seconds 1.5] [--json OUT]

`dcpctl bench kernel`'s compute ceiling is a burst figure (bench/ceilings.bf16_matmul_rate: ten 8192^3
products, each timed alone, about 20 ms of work), while a cell is timed over CUDA-graph replays that keep the
GPU busy for a few hundred ms.  This times, each after 3 s idle, back-to-back for --seconds: (1) the 8192^3
bf16 product, (2) FlashMLA on bench kernel's 128-head 128K x 32 cell (random pages of a 9.6 GB pool, as bench
kernel) where it is built, and reads the SM clock and power (nvidia-smi, a thread, every 50 ms).  Prints
per-replay time, rate, clock.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import threading
import time

import torch

from dcpctl.bench.ceilings import bf16_matmul_rate


def smi() -> dict:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu,"
                              "clocks_throttle_reasons.active", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=5).stdout.strip().split(", ")
        return {"sm_mhz": float(out[0]), "watts": float(out[1]), "temp_c": float(out[2]), "throttle": out[3]}
    except Exception as e:  # noqa: BLE001
        return {"error": str(e)[:80]}


def curve(name: str, fn, per_graph: int, flops_per_call: float, seconds: float) -> list[dict]:
    """After 3 s idle: replays of a graph of per_graph calls until `seconds` passed; one row per replay."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(per_graph):
            fn()
    torch.cuda.synchronize()
    time.sleep(3.0)
    rows, t0, samples, stop = [], time.perf_counter(), [], threading.Event()

    def sample():   # a thread, so the GPU never waits for nvidia-smi
        while not stop.is_set():
            samples.append((time.perf_counter() - t0, smi()))
            time.sleep(0.05)
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    while time.perf_counter() - t0 < seconds:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        us = a.elapsed_time(b) * 1e3 / per_graph
        rows.append({"t_s": round(time.perf_counter() - t0, 3), "us_per_call": round(us, 1),
                     "tflops": round(flops_per_call / us / 1e6, 1)})
    stop.set()
    th.join()
    for r in rows:   # the nearest clock reading
        if samples:
            r.update(min(samples, key=lambda s: abs(s[0] - r["t_s"]))[1])
    print(f"{name}: " + " | ".join(f"{r['t_s']}s {r['us_per_call']}us {r['tflops']}TF {r.get('sm_mhz')}MHz "
                                   f"{r.get('watts')}W" for r in rows[:: max(1, len(rows) // 12)]),
          flush=True)
    return rows


def matmul_curve(dev: torch.device, seconds: float, n: int = 8192) -> list[dict]:
    x, w = torch.randn(n, n, device=dev, dtype=torch.bfloat16), torch.randn(n, n, device=dev,
                                                                            dtype=torch.bfloat16)
    y = torch.empty_like(x)
    return curve(f"matmul {n}^3", lambda: torch.matmul(x, w, out=y), 20, 2 * n ** 3, seconds)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--json")
    a = ap.parse_args()
    dev = torch.device("cuda")
    out = {"device": torch.cuda.get_device_name(), "idle": smi()}
    out["burst_bf16_tflops"] = bf16_matmul_rate(dev) / 1e12
    print(f"burst bf16 rate (bench kernel's ceiling): {out['burst_bf16_tflops']:.1f} TF/s", flush=True)
    out["matmul"] = matmul_curve(dev, a.seconds)
    from dcpctl.runtime.attention import flashmla
    if flashmla.load()[0] is not None:
        B, ctx, H, R, V = 32, 131072, 128, 576, 512
        pages = 131072          # bench kernel's pool: its largest cell, 128K x 64, in pages of 64
        kv = torch.randn(pages, 64, R, device=dev, dtype=torch.bfloat16)
        bt = torch.randperm(pages, device=dev)[:B * ctx // 64].int().view(B, -1)
        q = torch.randn(B, H, R, device=dev, dtype=torch.bfloat16)
        rows = flashmla.decode_rows(torch.full((B,), ctx, dtype=torch.int32, device=dev), H)
        out["flashmla_128h_128k_b32"] = curve("flashmla 128 heads 128K x 32",
                                              lambda: flashmla.run(q, kv, bt, rows, 1 / math.sqrt(192), V), 4,
                                              2 * B * H * ctx * (R + V), a.seconds)
    else:
        out["flashmla"] = flashmla.load()[1]
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
