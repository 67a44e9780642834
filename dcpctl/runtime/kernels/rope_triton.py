"""MLA's rope as Triton kernels that write where the result is read (CUDA bf16/fp16; models/rope.py is the
oracle).

    rope_q_into(q_pe [T, H, d], cos, sin [T, d/2] fp32, out [T, H, d], interleaved, fp32_math)
        the rope part of the absorbed query, straight into the query buffer's rope slice (no cat of [T, H, R])
    kv_rows_into(kv [T, L + d], norm_w [L], eps, cos, sin, dst [S, L + d], rows [W], slots [W], interleaved,
                 fp32_math)
        dst[slots[i]] = [rms_norm(kv[rows[i], :L]), rope(kv[rows[i], L:])]: the latent row of every written
        token normalized, rotated and stored into its KV-pool slot in one launch (replaces norm, rope, cat,
        index_select and index_copy)

The arithmetic is Rotary.apply's and ops.rms_norm's, rounding where they round: with fp32_math False (V3) each
product, and the sum, is rounded to x's dtype as torch's bf16 ops do; with fp32_math (V2's rope_fp32) the
rotation runs in fp32.  Launched with enable_fp_fusion=False: Triton turns the fp32-then-round steps into
bf16 multiplies and adds (each correctly rounded, which is what fp32-then-round gives), but with contraction
on it fuses a product into the sum as one bf16 FMA, one rounding fewer than torch (1-ulp differences,
large after cancellation, seen on an H200).  So the rope is bit-identical to torch's.  Layout as Rotary.apply:
out = (rotated evens, rotated odds) when interleaved, else (rotated first half, rotated second half).
"""
from __future__ import annotations

import torch
from torch import Tensor

from dcpctl.runtime.kernels import pdl
from dcpctl.runtime.kernels.norm_triton import triton

if triton is not None:
    import triton.language as tl

    @triton.jit
    def _rotate(x1, x2, c, s, FP32_MATH: tl.constexpr, DT: tl.constexpr):
        # x1, x2: fp32 (exact from x's dtype); c, s: fp32 angles -> (o1, o2) in fp32, rounded as torch rounds
        if FP32_MATH:
            o1 = x1 * c - x2 * s
            o2 = x2 * c + x1 * s
        else:
            c = c.to(DT).to(tl.float32)
            s = s.to(DT).to(tl.float32)
            a = (x1 * c).to(DT).to(tl.float32)
            b = (x2 * s).to(DT).to(tl.float32)
            e = (x2 * c).to(DT).to(tl.float32)
            f = (x1 * s).to(DT).to(tl.float32)
            o1 = (a - b).to(DT).to(tl.float32)
            o2 = (e + f).to(DT).to(tl.float32)
        return o1, o2

    @triton.jit
    def _pairs(j, HALF: tl.constexpr, INTERLEAVED: tl.constexpr):
        # column j's rotation partners: (2j, 2j + 1) interleaved, else (j, j + d/2)
        if INTERLEAVED:
            i1 = 2 * j
            i2 = 2 * j + 1
        else:
            i1 = j
            i2 = j + HALF
        return i1, i2

    @triton.jit
    def _rope_q_kernel(X, COS, SIN, Y, H, sxt, sxh, syt, syh, sct, HALF: tl.constexpr, BLOCK_H: tl.constexpr,
                       INTERLEAVED: tl.constexpr, FP32_MATH: tl.constexpr, PDL: tl.constexpr):
        pdl.enter(PDL)
        t, hb = tl.program_id(0), tl.program_id(1)
        h = hb * BLOCK_H + tl.arange(0, BLOCK_H)[:, None]
        j = tl.arange(0, HALF)[None, :]
        m = h < H
        c = tl.load(COS + t * sct + j)
        s = tl.load(SIN + t * sct + j)
        i1, i2 = _pairs(j, HALF, INTERLEAVED)
        x = X + t * sxt + h * sxh
        x1 = tl.load(x + i1, mask=m).to(tl.float32)
        x2 = tl.load(x + i2, mask=m).to(tl.float32)
        o1, o2 = _rotate(x1, x2, c, s, FP32_MATH, Y.dtype.element_ty)
        y = Y + t * syt + h * syh
        tl.store(y + j, o1.to(Y.dtype.element_ty), mask=m)
        tl.store(y + HALF + j, o2.to(Y.dtype.element_ty), mask=m)

    @triton.jit
    def _kv_rows_kernel(KV, W, COS, SIN, DST, ROWS, SLOTS, skt, sdt, sct, L, eps, BLOCK_L: tl.constexpr,
                        HALF: tl.constexpr, INTERLEAVED: tl.constexpr, FP32_MATH: tl.constexpr,
                        PDL: tl.constexpr):
        pdl.enter(PDL)
        i = tl.program_id(0)
        t = tl.load(ROWS + i)
        slot = tl.load(SLOTS + i)
        dt = DST.dtype.element_ty
        cols = tl.arange(0, BLOCK_L)
        mask = cols < L
        x = tl.load(KV + t * skt + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.rsqrt(tl.sum(x * x, axis=0) / L + eps)        # norm_triton._rms_norm_kernel's arithmetic
        y = (x * r).to(dt).to(tl.float32)
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        dst = DST + slot * sdt
        tl.store(dst + cols, (w * y).to(dt), mask=mask)
        j = tl.arange(0, HALF)
        c = tl.load(COS + t * sct + j)
        s = tl.load(SIN + t * sct + j)
        i1, i2 = _pairs(j, HALF, INTERLEAVED)
        pe = KV + t * skt + L
        o1, o2 = _rotate(tl.load(pe + i1).to(tl.float32), tl.load(pe + i2).to(tl.float32), c, s, FP32_MATH,
                         dt)
        tl.store(dst + L + j, o1.to(dt))
        tl.store(dst + L + HALF + j, o2.to(dt))


def rope_kernel_ok(x: Tensor, cos: Tensor, upcast: torch.dtype) -> bool:
    """Whether the kernels take these operands (CUDA bf16/fp16, fp32 angles, unit last stride); else torch."""
    half = cos.shape[-1] if cos.dim() == 2 else 0
    return (triton is not None and x.is_cuda and x.dtype in (torch.bfloat16, torch.float16)
            and cos.dtype == torch.float32 and upcast == torch.float32 and x.stride(-1) == 1
            and half > 0 and half & (half - 1) == 0 and cos.stride(-1) == 1)


def rope_q_into(q_pe: Tensor, cos: Tensor, sin: Tensor, out: Tensor, interleaved: bool,
                fp32_math: bool) -> None:
    # q_pe: [T, H, d] (a strided view)  cos, sin: [T, d/2] -> out: [T, H, d] (a view of the query buffer)
    T, H, _ = q_pe.shape
    if T == 0:
        return
    bh = min(16, triton.next_power_of_2(H))
    _rope_q_kernel[(T, triton.cdiv(H, bh))](q_pe, cos, sin, out, H, q_pe.stride(0), q_pe.stride(1),
                                            out.stride(0), out.stride(1), cos.stride(0), HALF=cos.shape[1],
                                            BLOCK_H=bh, INTERLEAVED=interleaved, FP32_MATH=fp32_math,
                                            num_warps=4, enable_fp_fusion=False, **pdl.kw())


def kv_rows_into(kv: Tensor, norm_w: Tensor, eps: float, cos: Tensor, sin: Tensor, dst: Tensor, rows: Tensor,
                 slots: Tensor, interleaved: bool, fp32_math: bool) -> None:
    # kv: [T, L + d] (kv_a's output, a strided view)  dst: [S, L + d] one layer's pool  rows, slots: [W] int64
    n, L = rows.shape[0], norm_w.shape[0]
    if n == 0:
        return
    block = triton.next_power_of_2(L)
    _kv_rows_kernel[(n,)](kv, norm_w, cos, sin, dst, rows, slots, kv.stride(0), dst.stride(0), cos.stride(0),
                          L, eps, BLOCK_L=block, HALF=cos.shape[1], INTERLEAVED=interleaved,
                          FP32_MATH=fp32_math, num_warps=4, enable_fp_fusion=False, **pdl.kw())
