"""What reading a weight once costs a graph-launched kernel that does nothing else: the floor under any GEMM
of it.

    read_floor_us(copies, graph_time) -> (us, setting)   the fastest of a few read-only kernel settings
    empty_us(graph_time) -> us                            an empty kernel, timed the same way

A read-only Triton kernel streams the weight's bytes (16-byte loads, grid-stride over programs, an xor of what
it read stored per program so no load is dropped), timed by the caller's `graph_time(fn, copies)`
(fp8_gemm.py's: 20 calls in one CUDA graph rotating over copies larger than twice the L2, median of 20
replays).  A GEMM of the same weight reads the same bytes and does more, so where this floor is already above
k x the weight-read roofline no GEMM of that shape can be within k x of it, one launch at a time.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from dcpctl.runtime.gpu import gpu_facts

SETTINGS = [(g, b, w) for g in (1, 2, 4, 8) for b, w in ((2048, 4), (8192, 8))]   # programs per SM, ints a step, warps


@triton.jit
def _read_kernel(src, out, n, BLOCK: tl.constexpr):
    pid, nprog = tl.program_id(0), tl.num_programs(0)
    acc = tl.zeros((BLOCK,), tl.int32)
    for i in range(pid * BLOCK, n, nprog * BLOCK):
        at = i + tl.arange(0, BLOCK)
        acc ^= tl.load(src + at, mask=at < n, other=0)
    tl.store(out + pid, tl.xor_sum(acc, axis=0))


@triton.jit
def _empty_kernel(out):
    pass


def read_floor_us(copies: list[torch.Tensor], graph_time) -> tuple[float, tuple[int, int, int]]:
    """Microseconds to read one of `copies` (contiguous, any dtype; their bytes as int32) and the best
    setting."""
    sms = gpu_facts(copies[0].device).sms
    ints = [c.view(-1).view(torch.int32) for c in copies]
    out = torch.empty(8 * sms, dtype=torch.int32, device="cuda")
    best = None
    for g, b, w in SETTINGS:
        us = graph_time(lambda i: _read_kernel[(g * sms,)](ints[i], out, ints[i].numel(), BLOCK=b, num_warps=w),
                        len(ints)) * 1e6
        if best is None or us < best[0]:
            best = (round(us, 2), (g, b, w))
    return best


def empty_us(graph_time) -> float:
    out = torch.empty(1, dtype=torch.int32, device="cuda")
    return round(graph_time(lambda i: _empty_kernel[(1,)](out), 1) * 1e6, 2)
