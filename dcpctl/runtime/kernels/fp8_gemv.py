"""Block-FP8 GEMM for a few rows (decode): a weight-streaming kernel on the CUDA cores, no MMA.

    fp8_gemv(x, w8, scale, block, ends=None, sms, tiles: GemvTiles) -> [R, N] in x.dtype

The same methods and arguments as fp8_gemm.fp8_matmul (which calls this one where choose_tiles picks a
GemvTiles): w8a16, each 16-bit row times the e4m3 weight in fp32, or w8a8, activations quantized per token
and K block of b1 columns to e4m3 (`s = amax / 448`); the weight's 128x128 block factors, fp32 sums. The
products are exact in fp32 either way, so the only difference from the MMA kernel is the order of the fp32
sums (and, w8a16, the MMA's 16-bit operands: also exact). What differs is the shape of the work: at a
few rows the GEMM is a weight read, so each program streams a [BN, KB x b1] slab of W per step (b1 bytes
contiguous per weight row: wide coalesced loads), keeps it in registers and applies it to each of its rows
in turn (per b1 block: sum of products, times the weight block's factor and the row's block scale). The
grid is (experts or busy-expert slots, N tiles, K splits):

| case    | programs                                                         | partial sums                  |
| ------- | ---------------------------------------------------------------- | ----------------------------- |
| dense   | N / BN tiles x K splits (about `per_sm` programs per SM)         | fp8_parts._sum_partials       |
| grouped | min(R, E) slots x N / BN: slot j takes the j-th expert with rows | none (each program all of K)  |

Grouped, the programs of a decode step's few busy experts are the only ones launched (E x N / BN
programs of which all but ~8 exit would cost more than the GEMM); which expert a slot takes is read from
the group ends on the device (a prefix count), so no host sync.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from torch import Tensor

from dcpctl.runtime.kernels.fp8_parts import (_counters, _split, _store_tile, _sum_partials, quantize_rows,
                                             quantize_rows_gpu)


@dataclass(frozen=True)
class GemvTiles:
    """A setting of the few-rows kernel (this module: CUDA cores, no MMA)."""
    bn: int = 16          # weight rows per program
    kb: int = 2           # K blocks of b1 columns per step (a [bn, kb * b1] slab of W per load)
    warps: int = 4
    per_sm: int = 8       # dense GEMMs: K splits until about this many programs run per SM
    fuse: bool = True     # quantize the activations inside the GEMM (one launch), else a launch first
    bm: int = 16          # rows applied per pass over the weight (more rows: another pass, from L2)
    stages: int = 3       # slabs in flight per program (software-pipelined loads); 1: each load waited for


# the row count is no specialization: every batch size of one tile setting shares one compiled kernel
# (benchmarks/fp8_compiles.py counts what a first start compiles)
@triton.jit(do_not_specialize=["R"])
def _fp8_gemv_kernel(x_ptr, xs_ptr, w_ptr, ws_ptr, ends_ptr, out_ptr, part_ptr, count_ptr,
                     R, N, K, E, nkb, kb_per_split, splits, sx, sw_e, sw_n, sws_e, sws_n,
                     B0: tl.constexpr, B1: tl.constexpr, KB: tl.constexpr, BN: tl.constexpr, BM: tl.constexpr,
                     EP: tl.constexpr, GROUPED: tl.constexpr, SPLIT: tl.constexpr, QUANT: tl.constexpr,
                     RED: tl.constexpr, STAGES: tl.constexpr, A16: tl.constexpr):
    # x: [R, K] 16/32-bit, row stride sx (QUANT, or A16: not quantized) or x8 [R, K] e4m3 + xs [R, nkb]; w:
    # [E, N, K] e4m3, ws: its factors -> out [R, N]; with SPLIT, part [splits, R, N] fp32
    slot = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    if GROUPED:   # slot j -> the j-th expert with rows: experts before it are those whose busy count <= j
        ee = tl.arange(0, EP)
        e_ok = ee < E
        ends = tl.load(ends_ptr + ee, mask=e_ok, other=0)
        starts = tl.load(ends_ptr + ee - 1, mask=e_ok & (ee > 0), other=0)
        busy = tl.cumsum(((ends > starts) & e_ok).to(tl.int32), axis=0)
        e = tl.sum((busy <= slot).to(tl.int32), axis=0)
        row0 = tl.sum(tl.where(ee == e, starts, 0), axis=0)   # e past the busy ones: no rows
        row1 = tl.sum(tl.where(ee == e, ends, 0), axis=0)
        e = tl.minimum(e, E - 1)
    else:
        e = 0
        row0 = 0
        row1 = R
    n = pid_n * BN + tl.arange(0, BN)
    n_ok = n < N
    kb0 = pid_k * kb_per_split
    kb1 = tl.minimum(kb0 + kb_per_split, nkb)
    k_end = tl.minimum(K, kb1 * B1)   # this split's columns end here
    jj = tl.arange(0, KB)
    kk = tl.arange(0, B1)
    mm = tl.arange(0, BM)
    w_base = w_ptr + e.to(tl.int64) * sw_e + n[:, None, None].to(tl.int64) * sw_n
    ws_base = ws_ptr + e * sws_e + (n // B0)[:, None] * sws_n
    for m0 in range(row0, row1, BM):
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kb in tl.range(kb0, kb1, KB, num_stages=STAGES):   # STAGES > 1: slabs loaded ahead (cp.async)
            k = (kb + jj)[:, None] * B1 + kk[None, :]                                         # [KB, B1]
            k_ok = k < k_end
            w = tl.load(w_base + k[None, :, :], mask=n_ok[:, None, None] & k_ok[None, :, :], other=0.0)
            w = w.to(tl.float32)                                                              # [BN, KB, B1]
            ws = tl.load(ws_base + kb + jj[None, :], mask=n_ok[:, None] & (kb + jj < nkb)[None, :], other=0.0)
            for i in tl.static_range(BM):
                r = m0 + i
                x_ok = k_ok & (r < row1)
                if A16:     # w8a16: the row as it is (fp32 products with the exact e4m3 values)
                    xq = tl.load(x_ptr + r.to(tl.int64) * sx + k, mask=x_ok, other=0.0).to(tl.float32)
                    y = tl.sum(tl.sum(w * xq[None, :, :], axis=2) * ws, axis=1)                   # [BN]
                else:
                    if QUANT:   # as quantize_rows: s = amax / 448 per row and K block
                        xf = tl.load(x_ptr + r.to(tl.int64) * sx + k, mask=x_ok, other=0.0).to(tl.float32)
                        s = tl.maximum(tl.max(tl.abs(xf), axis=1), 1e-10) / 448.0                # [KB]
                        xq = (xf / s[:, None]).to(tl.float8e4nv).to(tl.float32)
                    else:
                        xq = tl.load(x_ptr + r.to(tl.int64) * K + k, mask=x_ok, other=0.0).to(tl.float32)
                        s = tl.load(xs_ptr + r * nkb + kb + jj, mask=(kb + jj < nkb) & (r < row1), other=0.0)
                    y = tl.sum(tl.sum(w * xq[None, :, :], axis=2) * ws * s[None, :], axis=1)   # [BN]
                acc += tl.where(mm[:, None] == i, y[None, :], 0.0)
        rows = m0 + mm
        at = rows[:, None].to(tl.int64) * N + n[None, :]
        ok = (rows < row1)[:, None] & n_ok[None, :]
        _store_tile(out_ptr, part_ptr, pid_k, R, N, at, acc, ok, SPLIT)
    if SPLIT:
        _sum_partials(part_ptr, out_ptr, count_ptr, pid_n, R, N, n, n_ok, splits, BM, BN, RED)


def fp8_gemv(x: Tensor, w3: Tensor, s3: Tensor, block: tuple[int, int], ends: Tensor | None, sms: int,
             t: GemvTiles, a16: bool = False) -> Tensor:
    # x: [R, K]  w3: [E, N, K] e4m3  s3: [E, ceil(N/b0), ceil(K/b1)]  ends: [E] int32 or None -> [R, N]
    b0, b1 = block
    E, N, K = w3.shape
    R = x.shape[0]
    grouped = ends is not None
    nkb = -(-K // b1)
    n_tiles = triton.cdiv(N, t.bn)
    splits = _split(nkb, n_tiles, sms, t.per_sm, E if grouped else 1)
    per = -(-nkb // splits)
    per = -(-per // t.kb) * t.kb if splits > 1 else per   # split bounds on whole steps of KB blocks
    splits = -(-nkb // per)
    rows = R if not grouped else max(1, R // E)
    bm = min(t.bm, triton.next_power_of_2(rows))
    x = x.contiguous()
    if t.fuse or a16:
        xq, xs = x, x   # xs unused
    else:
        xq, xs = quantize_rows_gpu(x, b1) if x.is_cuda else quantize_rows(x, b1)
    out = (torch.zeros if grouped else torch.empty)((R, N), dtype=x.dtype, device=x.device)
    part = torch.empty((splits, R, N), dtype=torch.float32, device=x.device) if splits > 1 else out
    ends_arg = ends if grouped else torch.empty(1, dtype=torch.int32, device=x.device)
    grid = (min(R, E) if grouped else 1, n_tiles, splits)
    _fp8_gemv_kernel[grid](xq, xs, w3, s3, ends_arg, out, part, _counters(x.device, n_tiles),
                           R, N, K, E, nkb, per, splits, x.stride(0),
                           w3.stride(0), w3.stride(1), s3.stride(0), s3.stride(1),
                           B0=b0, B1=b1, KB=t.kb, BN=t.bn, BM=bm, EP=triton.next_power_of_2(E),
                           GROUPED=grouped, SPLIT=splits > 1, QUANT=t.fuse and not a16, A16=a16,
                           RED=max(1, min(8, 4096 // (bm * t.bn))), STAGES=t.stages, num_warps=t.warps)
    return out
