"""What the two block-FP8 kernels share (fp8_gemm.py's MMA kernel, fp8_gemv.py's few-rows kernel): activation
quantization (1 x b1 blocks of e4m3, `s = amax(|x|) / 448`), the K-split arithmetic, the per-tile partial sums
that the last program of a tile adds in a fixed order, and the per-device tile counts those sums use.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from dcpctl.runtime import settings

FP8_MAX = 448.0
# What the block-FP8 GEMMs do with the activations.  w8a16 (the default): the activations stay in the model's
# 16-bit dtype and each e4m3 weight tile is converted to it in registers (exact), so the GEMM computes what
# the dequantized-bf16 path computes but for the order of its fp32 sums, reading half the weight bytes.  w8a8:
# the activations are quantized 1 x b1 to e4m3 (`s = amax / 448`) for an e4m3 MMA, as DeepSeek's inference
# code and SGLang/vLLM do: twice the MMA rate (prefill), and the quantization's own error (2.6% of a V3 GEMM's
# output on random activations).
MODES = ("w8a16", "w8a8")
# The launch config's runtime.fp8_gemm (plan/runtime_choices.py FP8_GEMM_CHOICES): one method for every GEMM,
# or `auto`: per GEMM by its shape and row count (fp8_tiles.method: the GPU's measured table, else w8a8 above
# PREFILL_ROWS rows, where the e4m3 MMA's rate pays, and w8a16 at or below, where the weight read is the cost)
CHOICES = ("auto",) + MODES
PREFILL_ROWS = 64


def activation_mode() -> str:
    """The launch config's runtime.fp8_gemm (auto, w8a16 or w8a8; the plan decides it, --fp8-gemm)."""
    return settings.current().fp8_gemm


@triton.jit
def _store_tile(out_ptr, part_ptr, pid_k, R, N, at, acc, ok, SPLIT: tl.constexpr):
    # acc: fp32 values at out offsets `at` -> out (x's dtype), or with SPLIT this K split's partial
    if SPLIT:
        tl.store(part_ptr + pid_k.to(tl.int64) * R * N + at, acc, mask=ok)
    else:
        tl.store(out_ptr + at, acc.to(out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _sum_partials(part_ptr, out_ptr, count_ptr, pid_n, R, N, n, n_ok, splits, BM: tl.constexpr,
                  BN: tl.constexpr, RED: tl.constexpr):
    # part: [splits, R, N] fp32 of this N tile's columns n -> out [R, N]: the tile's last program to finish
    # (an atomic count per tile, reset by that program) sums them in split order, RED partials a load
    done = tl.atomic_add(count_ptr + pid_n, 1, sem="acq_rel")   # release our partial, see the others'
    if done == splits - 1:
        for m0 in range(0, R, BM):
            rr = m0 + tl.arange(0, BM)
            sum_ok = (rr < R)[:, None] & n_ok[None, :]
            sum_at = rr[:, None].to(tl.int64) * N + n[None, :]
            total = tl.zeros((BM, BN), dtype=tl.float32)
            for sp0 in range(0, splits, RED):   # RED partials per load, summed in a fixed order
                sp = sp0 + tl.arange(0, RED)
                p = tl.load(part_ptr + sp[:, None, None].to(tl.int64) * R * N + sum_at[None, :, :],
                            mask=(sp < splits)[:, None, None] & sum_ok[None, :, :], other=0.0,
                            cache_modifier=".cg")
                total += tl.sum(p, axis=0)
            tl.store(out_ptr + sum_at, total.to(out_ptr.dtype.element_ty), mask=sum_ok)
        tl.atomic_xchg(count_ptr + pid_n, 0)                     # ready for the next call (graph replays too)


@triton.jit(do_not_specialize=["R", "RP", "ss_r"])
def _quant_kernel(x_ptr, x8_ptr, s_ptr, R, RP, K, sx, ss_r, ss_k, BR: tl.constexpr, BK: tl.constexpr):
    # x: [R, K] (row stride sx) -> x8 [RP, K] e4m3 contiguous, s[r, kb] at r * ss_r + kb * ss_k: one program
    # per BR rows and K block; rows R..RP-1 (padding) quantize zeros
    r = tl.program_id(0) * BR + tl.arange(0, BR)
    kb = tl.program_id(1)
    k = kb * BK + tl.arange(0, BK)
    k_ok = (k < K)[None, :]
    x = tl.load(x_ptr + r[:, None].to(tl.int64) * sx + k[None, :], mask=(r < R)[:, None] & k_ok,
                other=0.0).to(tl.float32)
    s = tl.maximum(tl.max(tl.abs(x), axis=1), 1e-10) / 448.0
    tl.store(x8_ptr + r[:, None].to(tl.int64) * K + k[None, :], (x / s[:, None]).to(tl.float8e4nv),
             mask=(r < RP)[:, None] & k_ok)
    tl.store(s_ptr + r.to(tl.int64) * ss_r + kb * ss_k, s, mask=r < RP)


def quantize_rows(x: Tensor, b1: int) -> tuple[Tensor, Tensor]:
    # x: [R, K] -> x8 [R, K] e4m3, s [R, ceil(K/b1)] fp32 with x ~ x8 * s per (row, K block)
    R, K = x.shape
    nkb = -(-K // b1)
    padded = torch.zeros(R, nkb * b1, dtype=torch.float32, device=x.device)
    padded[:, :K] = x.float()
    blocks = padded.view(R, nkb, b1)
    s = blocks.abs().amax(-1).clamp(min=1e-10) / FP8_MAX
    x8 = (blocks / s[..., None]).view(R, nkb * b1)[:, :K].to(torch.float8_e4m3fn)
    return x8.contiguous(), s.contiguous()


def _split(nkb: int, tiles: int, sms: int, per_sm: int, experts: int, max_split: int = 0) -> int:
    """K splits of a dense GEMM so that about per_sm programs run on every SM (none for grouped ones:
    their programs come per expert), at most max_split when given, every split non-empty."""
    split = 1 if experts > 1 else max(1, min(nkb, -(-per_sm * sms // tiles)))
    if max_split:
        split = min(split, max_split)
    return -(-nkb // -(-nkb // split))


def quantize_rows_gpu(x: Tensor, b1: int, pad: int = 1, k_major: bool = False) -> tuple[Tensor, Tensor]:
    """x: [R, K] cuda -> x8 [RP, K] e4m3, s [RP, ceil(K/b1)] fp32 (one launch); RP: R rounded up to a multiple
    of `pad` (the padding rows quantize zeros); k_major: s laid out K block by K block (strides (1, RP): the
    layout cuBLAS's block-scaled GEMM reads), else row by row."""
    R, K = x.shape
    nkb = -(-K // b1)
    rp = -(-R // pad) * pad
    x8 = torch.empty((rp, K), dtype=torch.float8_e4m3fn, device=x.device)
    if k_major:
        s = torch.empty_strided((rp, nkb), (1, rp), dtype=torch.float32, device=x.device)
    else:
        s = torch.empty((rp, nkb), dtype=torch.float32, device=x.device)
    br = 1 if rp < 64 else 16
    _quant_kernel[(triton.cdiv(rp, br), nkb)](x, x8, s, R, rp, K, x.stride(0), s.stride(0), s.stride(1),
                                              BR=br, BK=b1, num_warps=1 if br == 1 else 4)
    return x8, s


_COUNTERS: dict[str, Tensor] = {}
_MAX_TILES = 1 << 14


def prepare(device: torch.device | str) -> None:
    """Allocate this device's tile counts now (at load), not inside a CUDA graph capture."""
    _counters(torch.device(device), 1)


def _counters(device: torch.device, n: int) -> Tensor:
    """One zeroed int32 count per N tile, kept per device (each GEMM leaves them zero again)."""
    if n > _MAX_TILES:
        raise ValueError(f"fp8 GEMM with {n} N tiles; at most {_MAX_TILES}")
    key = str(device)
    if key not in _COUNTERS:
        _COUNTERS[key] = torch.zeros(_MAX_TILES, dtype=torch.int32, device=device)
    return _COUNTERS[key]
