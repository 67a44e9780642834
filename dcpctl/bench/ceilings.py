"""Measured machine ceilings and GPU timers shared by the benchmarks (CUDA only).

copy bandwidth: one large device-to-device copy, counting bytes read plus bytes written;
bf16 matmul rate: an 8192^3 product on random data.  Both are medians over repeated runs, each timed alone (a
burst: the GPU at its boost clock).  The sustained bf16 rate is the same product back to back in CUDA graphs
after half a second of them: on an H200 the SM clock falls from 1980 to about 1470 MHz within 0.1 s of such
work and the rate from ~770 to ~670 TFLOP/s (benchmarks/sustained_rate.py; docs/benchmarks.md), which is the
regime a kernel timed over graph replays runs in.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable

import torch


@dataclass(frozen=True)
class Ceilings:
    copy_bytes_per_s: float
    bf16_flops_per_s: float

    def roofline_s(self, nbytes: float, flops: float) -> float:
        return max(nbytes / self.copy_bytes_per_s, flops / self.bf16_flops_per_s)

    def calibration(self) -> dict[str, float]:
        return {"copy_tbps": round(self.copy_bytes_per_s / 1e12, 4),
                "bf16_tflops": round(self.bf16_flops_per_s / 1e12, 2)}


def events_ms(fn: Callable[[], object], reps: int = 20, warmup: int = 3) -> float:
    """Median milliseconds of fn() timed alone with CUDA events (after warm-up)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def graph_ms(fns: list[Callable[[], object]], replays: int = 10, preheat_s: float = 0.0) -> float:
    """Median milliseconds per call of fns (called in turn) captured in one CUDA graph: no launch gaps.
    preheat_s: replay that long first, so the timed replays run at the clock this work sustains."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fns:
            f()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for f in fns:
            f()
    _preheat(g.replay, preheat_s)
    return events_ms(g.replay, reps=replays, warmup=2) / len(fns)


def _preheat(fn: Callable[[], object], seconds: float) -> None:
    # call fn back to back for `seconds` (the GPU settles at the clock this work sustains)
    import time
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        fn()
        torch.cuda.synchronize()


def rotation_us(fns: list[Callable[[], object]], preheat_s: float = 0.0) -> tuple[float, str]:
    """(microseconds per call, "graph" or why eager) over a rotation of calls, repeated to at least 8: a graph
    replay, or the same calls eagerly when they do not capture (a field kernel's capture failure); either way
    after preheat_s seconds of them."""
    fns = fns * max(1, -(-8 // len(fns)))
    try:
        return graph_ms(fns, preheat_s=preheat_s) * 1e3, "graph"
    except Exception as e:
        _preheat(lambda: [f() for f in fns], preheat_s)
        us = events_ms(lambda: [f() for f in fns], reps=10, warmup=2) / len(fns) * 1e3
        return us, f"eager ({type(e).__name__}: {str(e).splitlines()[0][:160]})"


def copy_bandwidth(device: torch.device, nbytes: int = 4 << 30) -> float:
    # src, dst: [nbytes] uint8 -> bytes/s counting read + write
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = events_ms(lambda: dst.copy_(src), reps=10)
    return 2 * nbytes / (ms * 1e-3)


def bf16_matmul_rate(device: torch.device, n: int = 8192) -> float:
    # a, b: [n, n] bf16 random -> flop/s
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    ms = events_ms(lambda: a @ b, reps=10)
    return 2 * n ** 3 / (ms * 1e-3)


def sustained_bf16_rate(device: torch.device, n: int = 8192, seconds: float = 0.5,
                        per_graph: int = 10) -> float:
    """flop/s of back-to-back n^3 bf16 products after `seconds` of them (the median of 5 timed graph
    replays)."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    c = torch.empty_like(a)
    ms = graph_ms([lambda: torch.matmul(a, b, out=c)] * per_graph, replays=5, preheat_s=seconds)
    return 2 * n ** 3 / (ms * 1e-3)


def measure(device: torch.device) -> Ceilings:
    return Ceilings(copy_bandwidth(device), bf16_matmul_rate(device))
