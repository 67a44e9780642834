"""Block-scaled FP8 GEMM (Triton): y = x @ W^T with W in e4m3 and one fp32 factor per (b0 x b1) block.

    fp8_matmul(x, w8, scale, block, ends=None) -> [R, N] in x.dtype

Two methods (fp8_parts.MODES); the launch config's runtime.fp8_gemm (decided by the plan) names one for every
GEMM, or `auto` (the default): each GEMM's by its shape and row count (fp8_tiles.method: the GPU's measured
table, else w8a16 at decode's rows and w8a8 above); w8a8 GEMMs of prefill rows go to cuBLAS's block-scaled FP8
GEMM where it runs (fp8_cublas.py) instead of this kernel.
- w8a16: x stays in its 16-bit dtype; each e4m3 weight tile is converted in registers (exact) for a
  16-bit MMA, times the weight block's factor: the dequantized weight's GEMM but for the order of the fp32
  sums (and the bf16 rounding of a dequantized weight, which this skips), at half its weight bytes. bf16 rows
  in tiles of 16 go through an fp16 MMA, each row's K block scaled into fp16 by a power of two (A16_MMA: the
  same products, a cheaper weight conversion); larger tiles through a bf16 MMA. Where a setting folds
  (`Tiles.fold`) the factor goes into the converted tile, rounded to x's dtype as the dequantized
  checkpoint's weight is, so that the MMA accumulates over K without a wait per K block.
- w8a8: the activations are quantized per token and per K block of b1 columns, as DeepSeek's inference code
  and SGLang/vLLM do (`s = amax(|x|) / 448`, `x8 = x / s`), for an e4m3 MMA: for up to `Tiles.fuse_rows` rows
  inside the GEMM itself (each program quantizes the rows of its K blocks as it loads them: one launch), above
  that by a small launch first.
The GEMM reads W once in all: at decode sizes the weight read is the whole cost.

| argument | shape                         | meaning                                                         |
| -------- | ----------------------------- | --------------------------------------------------------------- |
| x        | [R, K]  16/32-bit             | rows; grouped: sorted by expert, expert e owns                  |
|          |                               | [ends[e-1], ends[e])                                            |
| w8       | [N, K] or [E, N, K] e4m3      | the weight (one matrix per expert when grouped)                 |
| scale    | [ceil(N/b0), ceil(K/b1)] (+E) | real W = w8 * scale[n // b0, k // b1]                           |
| ends     | [E] int32 or None             | grouped GEMM: rows past ends[-1] are left unwritten             |

The grid is (experts, N tiles, K splits); a dense GEMM of more than M_TILE_ROWS rows (a prefill) puts its M
tiles on the first axis instead, with no K split. Under w8a16 a dense GEMM of more than PREFILL_DEQUANT_ROWS
rows does not run this kernel: its weight is dequantized to x's dtype on the GPU (fp8_dequant.py, the loader's
values) for F.linear, the dequantized path's own GEMM. K splits (decode with few N tiles) write fp32 partials;
the last program of each N tile to finish (an atomic count per tile, reset by that program) sums them in
split order, `Tiles.red` partials a load, and writes the output, so one launch does it and results are
deterministic. `Tiles.swap` puts the weight rows on the MMA's M side (y^T = W x^T), which decode's few
tokens cannot fill. The setting per (N, K, rows) is `choose_tiles` (fp8_tiles.py: rules by row count and the
GPU's fp8_gemm tuning table), said once at load by quant.fp8_compute's note. Graph-safe: no host
syncs, buffers sized by the shapes only. On the CPU (Triton's interpreter, tests only) rows quantized
outside the kernel use torch: the interpreter's own e4m3 cast rounds differently.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch import Tensor
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from dcpctl.runtime.kernels import fp8_tiles
from dcpctl.runtime.kernels.fp8_cublas import CublasW8a8, cublas_matmul
from dcpctl.runtime.kernels.fp8_dequant import DequantLinear, dequantize_gpu
from dcpctl.runtime.kernels.fp8_gemv import GemvTiles, fp8_gemv
from dcpctl.runtime.kernels.fp8_parts import (CHOICES, MODES, _counters, _split, _store_tile,  # noqa: F401
                                             _sum_partials, activation_mode, prepare, quantize_rows,
                                             quantize_rows_gpu)
from dcpctl.runtime.kernels.fp8_tiles import (BEFORE_TILES, DEFAULT_GEMV, DEFAULT_TILES, DEQUANT,  # noqa: F401
                                             GEMV_ROWS, GROUPED_GEMV_ROWS, M_TILE_ROWS, PREFILL_A16_TILES,
                                             PREFILL_DEQUANT_ROWS, PREFILL_GROUPED_A16_TILES, Kernel, Tiles,
                                             choose, choose_tiles, methods_note, tiles_note)



@triton.jit
def _dot(a, b):
    # a 16-bit MMA, or fp32 products in full precision (not TF32) for a 32-bit model
    if a.dtype == tl.float32:
        return tl.dot(a, b, input_precision="ieee")
    return tl.dot(a, b)


@triton.jit
def _dot_acc(a, b, acc):
    # _dot accumulating into acc (the MMA chain Triton pipelines: the next K block's loads and conversion
    # overlap it)
    if a.dtype == tl.float32:
        return tl.dot(a, b, acc, input_precision="ieee")
    return tl.dot(a, b, acc)


@triton.jit
def _fp16_rows(x):
    # x: [BM, BK] bf16 -> (x * 2^-e_r in fp16, 2^e_r fp32 per row): each row's K block scaled by a power of
    # two so that its largest |x| lands in [2^8, 2^9), exact (bf16's 8 significant bits fit fp16's 11; only
    # entries under 2^-22 of the row's largest lose bits, in fp16's subnormals). Exponents from the bits:
    # exact powers of two.
    xf = x.to(tl.float32)
    e = (tl.max(tl.abs(xf), axis=1).to(tl.int32, bitcast=True) >> 23) & 0xFF    # biased exponent of the amax
    e = tl.minimum(tl.maximum(e, 9), 254)                                       # zero rows, and no Inf scales
    inv = ((262 - e) << 23).to(tl.float32, bitcast=True)                       # 2^(135 - e)
    back = ((e - 8) << 23).to(tl.float32, bitcast=True)                        # 2^(e - 135)
    return (xf * inv[:, None]).to(tl.float16), back


# the row count is no specialization: every batch size of one tile setting shares one compiled kernel
# (benchmarks/fp8_compiles.py counts what a first start compiles)
@triton.jit(do_not_specialize=["R", "m_rows"])
def _fp8_gemm_kernel(x_ptr, xs_ptr, w_ptr, ws_ptr, ends_ptr, out_ptr, part_ptr, count_ptr,
                     R, N, K, nkb, kb_per_split, splits, sx, m_rows,
                     sw_e, sw_n, sws_e, sws_n,
                     B0: tl.constexpr, BK: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                     GROUPED: tl.constexpr, SPLIT: tl.constexpr, QUANT: tl.constexpr, SWAP: tl.constexpr,
                     RED: tl.constexpr, PDL: tl.constexpr, A16: tl.constexpr, F16: tl.constexpr,
                     FOLD: tl.constexpr):
    # x8: [R, K] e4m3 contiguous, xs: [R, nkb] fp32 (QUANT: x [R, K] 16/32-bit, row stride sx, quantized
    # here; A16: x itself, each weight tile converted to x's dtype) -> out [R, N]; with SPLIT, part [splits,
    # R, N] fp32.  SWAP computes the [BN, BM] transpose
    # axis 0: the expert (grouped) or the M tile of m_rows rows (dense; one tile of all R rows at decode
    # sizes)
    if GROUPED:
        e = tl.program_id(0)
    else:
        e = tl.program_id(0) * 0
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    n = pid_n * BN + tl.arange(0, BN)
    n_ok = n < N
    kb0 = pid_k * kb_per_split
    kb1 = tl.minimum(kb0 + kb_per_split, nkb)
    kk = tl.arange(0, BK)
    w_base = w_ptr + e.to(tl.int64) * sw_e + n[:, None].to(tl.int64) * sw_n
    ws_base = ws_ptr + e * sws_e + (n // B0) * sws_n
    if PDL:   # launched before the previous kernel ends: pull this program's weight slab (which no kernel
        # writes) into L2 meanwhile, then wait for it before anything it writes (x, counts, partials)
        w_rows = tl.where(n_ok, w_ptr + e.to(tl.int64) * sw_e + n.to(tl.int64) * sw_n, w_ptr)
        for kb in range(kb0, kb1):   # one 128-byte line per weight row and K block of 128
            tl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [w_rows + kb * BK],
                                      dtype=tl.int32, is_pure=False, pack=1)
        gdc_wait()
        gdc_launch_dependents()
    if GROUPED:   # after the PDL wait: the group ends come from the kernel before
        row1 = tl.load(ends_ptr + e)
        row0 = tl.load(ends_ptr + e - 1, mask=e > 0, other=0)
    else:
        row0 = tl.program_id(0) * m_rows
        row1 = tl.minimum(row0 + m_rows, R)
    for m0 in range(row0, row1, BM):
        rows = m0 + tl.arange(0, BM)
        r_ok = rows < row1
        if SWAP:
            acc = tl.zeros((BN, BM), dtype=tl.float32)
        else:
            acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kb in range(kb0, kb1):
            k = kb * BK + kk
            k_ok = k < K
            x_ok = r_ok[:, None] & k_ok[None, :]
            w = tl.load(w_base + k[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0)
            ws = tl.load(ws_base + kb, mask=n_ok, other=0.0)
            if A16 and FOLD:   # w8a16, the factor folded into the tile: e4m3 x factor in fp32, rounded to x's
                # dtype (the dequantized checkpoint's weight, bit for bit), so the MMA accumulates the K
                # blocks
                xa = tl.load(x_ptr + rows[:, None].to(tl.int64) * sx + k[None, :], mask=x_ok, other=0.0)
                wa = (w.to(tl.float32) * ws[:, None]).to(xa.dtype)
                if SWAP:
                    acc = _dot_acc(wa, tl.trans(xa), acc)
                else:
                    acc = _dot_acc(xa, tl.trans(wa), acc)
            elif A16:     # w8a16: the e4m3 tile in x's dtype (exact), a 16-bit MMA, the weight block's factor
                xa = tl.load(x_ptr + rows[:, None].to(tl.int64) * sx + k[None, :], mask=x_ok, other=0.0)
                if F16:   # bf16 rows through an fp16 MMA (see _fp16_rows): e4m3 -> fp16 is one conversion a
                          # pair
                    xa, xe = _fp16_rows(xa)
                wa = w.to(xa.dtype)
                if SWAP:
                    d = _dot(wa, tl.trans(xa)) * ws[:, None]
                    if F16:   # the rows' powers of two back
                        d = d * xe[None, :]
                else:
                    d = _dot(xa, tl.trans(wa))
                    if F16:
                        d = d * xe[:, None]
                    d = d * ws[None, :]
                acc += d
            else:
                if QUANT:   # the K block is one scale group (BK == b1): s = amax / 448 per row, as
                            # quantize_rows
                    xf = tl.load(x_ptr + rows[:, None].to(tl.int64) * sx + k[None, :], mask=x_ok, other=0.0)
                    xf = xf.to(tl.float32)
                    s = tl.maximum(tl.max(tl.abs(xf), axis=1), 1e-10) / 448.0
                    x8 = (xf / s[:, None]).to(tl.float8e4nv)
                else:
                    x8 = tl.load(x_ptr + rows[:, None].to(tl.int64) * K + k[None, :], mask=x_ok, other=0.0)
                    s = tl.load(xs_ptr + rows * nkb + kb, mask=r_ok, other=0.0)
                if SWAP:
                    acc += tl.dot(w, tl.trans(x8)) * ws[:, None] * s[None, :]
                else:
                    acc += tl.dot(x8, tl.trans(w)) * s[:, None] * ws[None, :]
        if SWAP:
            at = rows[None, :].to(tl.int64) * N + n[:, None]
            ok = n_ok[:, None] & r_ok[None, :]
        else:
            at = rows[:, None].to(tl.int64) * N + n[None, :]
            ok = r_ok[:, None] & n_ok[None, :]
        _store_tile(out_ptr, part_ptr, pid_k, R, N, at, acc, ok, SPLIT)
    if SPLIT:
        _sum_partials(part_ptr, out_ptr, count_ptr, pid_n, R, N, n, n_ok, splits, BM, BN, RED)


# w8a16's MMA for bf16 rows (the MMA kernel; fp16 and fp32 rows keep their own; the few-rows kernel has no
# MMA). "bf16" converts each e4m3 weight tile to bf16 (on sm_90: e4m3x2 -> f16x2, then one scalar cvt.bf16.f16
# per element); "fp16" converts it to fp16 (one instruction a pair) and scales each row's K block by a power
# of two into fp16 (_fp16_rows: exact, the same products), at the cost of converting the rows per tile. "auto"
# takes fp16 for dense tiles of 16 rows and grouped GEMMs of 16 rows or more in tiles of 16, bf16 otherwise.
A16_MMAS = ("auto", "fp16", "bf16")
A16_MMA = "auto"


def fp16_mma(a16_mma: str, bm: int, grouped: bool, rows: int) -> bool:
    """Whether w8a16 takes the fp16 MMA for bf16 rows in tiles of bm rows (rows: the GEMM's, all groups')."""
    return a16_mma == "fp16" or (a16_mma == "auto" and bm == 16 and (not grouped or rows >= 16))


_CHOICES: dict[tuple, tuple[Any, Kernel, bool]] = {}


def _choice(N: int, K: int, rows: int, experts: int, mode: str, R: int, block: tuple[int, int],
            device: torch.device) -> tuple[Kernel, bool]:
    # fp8_tiles.choose, once per distinct GEMM and table: an eager prefill calls it for every GEMM of every
    # layer, and the table lookups would cost the host more than a small GEMM takes on the GPU
    tables = fp8_tiles.current(device)
    key = (N, K, rows, experts, mode, R, block, str(device), id(tables))
    got = _CHOICES.get(key)
    if got is None or got[0] is not tables:   # (an id can come back for another table once the first is gone)
        if len(_CHOICES) > 1 << 14:
            _CHOICES.clear()
        got = _CHOICES[key] = (tables, *choose(N, K, rows, experts, mode, R, block, device=device,
                                               tables=tables))
    return got[1], got[2]


def fp8_matmul(x: Tensor, w8: Tensor, scale: Tensor, block: tuple[int, int], ends: Tensor | None = None,
               sms: int | None = None, tiles: Kernel | None = None, mode: str | None = None,
               a16_mma: str | None = None, rows: int | None = None) -> Tensor:
    """x @ W^T for a block-FP8 W (see the module docstring); `ends` makes it a grouped GEMM; mode: 'auto',
    'w8a16' or 'w8a8' (fp8_parts.CHOICES; None: activation_mode(), chosen at load; auto picks per GEMM:
    fp8_tiles.method); `tiles` fixes the kernel (then auto means w8a16); a16_mma: w8a16's MMA for bf16 rows
    (A16_MMAS; None: A16_MMA, auto); rows: a grouped GEMM's rows per expert to choose by (default R // E;
    under expert parallelism the MoE passes its own average: R holds every rank's rows)."""
    mode = mode or activation_mode()
    if mode not in CHOICES:
        raise ValueError(f"FP8 GEMM method {mode!r}; valid: {', '.join(CHOICES)}")
    a16_mma = a16_mma or A16_MMA
    if a16_mma not in A16_MMAS:
        raise ValueError(f"w8a16 MMA {a16_mma!r}; valid: {', '.join(A16_MMAS)}")
    b0, b1 = block
    grouped = ends is not None
    w3 = w8 if grouped else w8.unsqueeze(0)
    s3 = scale if grouped else scale.unsqueeze(0)
    E, N, K = w3.shape
    R = x.shape[0]
    nkb = -(-K // b1)
    if tiles is not None:
        t, a16 = tiles, mode != "w8a8"
    else:
        t, a16 = _choice(N, K, rows or max(1, R // E), E, mode, R, tuple(block), x.device)
    if isinstance(t, CublasW8a8):
        if grouped:
            raise ValueError("cuBLAS's block-scaled GEMM runs dense GEMMs only")
        if x.dtype == torch.bfloat16:   # the dtype its probe checked; other rows take the Triton w8a8 kernel
            return cublas_matmul(x, w8, scale)
        t, a16 = choose_tiles(N, K, R, 1, False, R, device=x.device), False
    if sms is None:   # the GPU's own count (the memoized probe); the CPU interpreter has no SMs to fill
        from dcpctl.runtime.gpu import gpu_facts
        sms = gpu_facts(x.device).sms if x.is_cuda else 1
    if isinstance(t, GemvTiles):
        return fp8_gemv(x, w3, s3, block, ends, sms, t, a16)
    if isinstance(t, DequantLinear):
        if grouped or not a16:
            raise ValueError("DequantLinear runs w8a16's dense GEMMs only")
        return F.linear(x, dequantize_gpu(w3[0], s3[0], block, x.dtype, t))
    rows = R if E == 1 else max(1, R // E)
    bm = t.bm or (16 if rows <= 16 else 32 if rows <= 32 else 64)
    # dense GEMMs of more than M_TILE_ROWS rows (prefill) spread their rows over programs, bm a program, with
    # no K split; up to it (decode) every program takes all the rows
    m_tiles = triton.cdiv(R, bm) if not grouped and R > M_TILE_ROWS else 1
    splits = 1 if m_tiles > 1 else _split(nkb, E * triton.cdiv(N, t.bn), sms, t.per_sm, E, t.max_split)
    per = -(-nkb // splits)
    x = x.contiguous()
    fuse = not a16 and R <= t.fuse_rows
    if fuse or a16:
        xq, xs = x, x   # xs unused
    else:
        xq, xs = quantize_rows_gpu(x, b1) if x.is_cuda else quantize_rows(x, b1)
    # grouped: rows past ends: 0
    out = (torch.zeros if grouped else torch.empty)((R, N), dtype=x.dtype, device=x.device)
    part = torch.empty((splits, R, N), dtype=torch.float32, device=x.device) if splits > 1 else out
    ends_arg = ends if grouped else torch.empty(1, dtype=torch.int32, device=x.device)
    n_tiles = triton.cdiv(N, t.bn)
    _fp8_gemm_kernel[(E if grouped else m_tiles, n_tiles, splits)](
                                           xq, xs, w3, s3, ends_arg, out, part, _counters(x.device, n_tiles),
                                           R, N, K, nkb, per, splits, x.stride(0),
                                           bm if m_tiles > 1 else max(R, 1), w3.stride(0), w3.stride(1),
                                           s3.stride(0), s3.stride(1), B0=b0, BK=b1, BM=bm, BN=t.bn,
                                           GROUPED=grouped, SPLIT=splits > 1, QUANT=fuse, SWAP=t.swap,
                                           RED=min(t.red, max(1, 8192 // (bm * t.bn))),
                                           PDL=t.pdl and x.is_cuda, A16=a16,
                                           F16=a16 and not t.fold and x.dtype == torch.bfloat16
                                           and fp16_mma(a16_mma, bm, grouped, R), FOLD=a16 and t.fold,
                                           num_warps=t.warps, num_stages=t.stages,
                                           launch_pdl=t.pdl and x.is_cuda)
    return out
