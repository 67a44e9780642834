"""RMSNorm as one Triton kernel on CUDA (the torch form is eight launches: upcast, pow, mean, add, rsqrt,
mul, downcast, weight mul; a V3 decode step has 17 norms, so 136 launches become 17).

    rms_norm_fused(x [T, D] bf16/fp16, weight [D], eps) -> [T, D]
    add_rms_norm_fused(x, residual [T, D], weight [D], eps) -> (h = x + residual, rms_norm(h)) in one launch
        (vLLM's fused_add_rms_norm, out of place: h is rounded to x's dtype before the norm reads it, as the
        torch form `h = x + residual; rms_norm(h)` rounds it)

The same arithmetic as models/ops.rms_norm (Hugging Face's order): normalize in fp32, round to x's dtype,
then multiply by the weight and round again; only the mean's summation order differs (a tree in the
kernel), which moves the result by at most an ulp of fp32 before the bf16 rounding.
"""
from __future__ import annotations

import torch
from torch import Tensor

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: ops.rms_norm keeps the torch form
    triton = None

from dcpctl.runtime.kernels import pdl


def fused_norm_ok(x: Tensor, weight: Tensor, upcast: torch.dtype) -> bool:
    """Whether rms_norm_fused takes these operands (else the torch form runs)."""
    return (triton is not None and x.is_cuda and x.dim() == 2 and x.dtype in (torch.bfloat16, torch.float16)
            and weight.dtype == x.dtype and upcast == torch.float32 and x.shape[1] <= 16384
            and x.stride(1) == 1)


if triton is not None:
    @triton.jit
    def _rms_norm_kernel(X, W, Y, stride_x, stride_y, D, eps, BLOCK: tl.constexpr, PDL: tl.constexpr):
        pdl.enter(PDL)
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < D
        x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.rsqrt(tl.sum(x * x, axis=0) / D + eps)
        y = (x * r).to(Y.dtype.element_ty).to(tl.float32)
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(Y + row * stride_y + cols, (w * y).to(Y.dtype.element_ty), mask=mask)


if triton is not None:
    @triton.jit
    def _add_rms_norm_kernel(X, R, W, H, Y, stride_x, stride_r, stride_h, stride_y, D, eps,
                             BLOCK: tl.constexpr, PDL: tl.constexpr):
        pdl.enter(PDL)
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < D
        x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
        res = tl.load(R + row * stride_r + cols, mask=mask, other=0.0).to(tl.float32)
        h = (x + res).to(H.dtype.element_ty)
        tl.store(H + row * stride_h + cols, h, mask=mask)
        hf = h.to(tl.float32)
        r = tl.rsqrt(tl.sum(hf * hf, axis=0) / D + eps)
        y = (hf * r).to(Y.dtype.element_ty).to(tl.float32)
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(Y + row * stride_y + cols, (w * y).to(Y.dtype.element_ty), mask=mask)


def add_rms_norm_fused(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    # x, residual: [T, D] -> h = x + residual, y = rms_norm(h): both [T, D]
    h = torch.empty_like(x, memory_format=torch.contiguous_format)
    y = torch.empty_like(h)
    if x.shape[0] == 0:
        return h, y
    block = triton.next_power_of_2(x.shape[1])
    _add_rms_norm_kernel[(x.shape[0],)](x, residual, weight, h, y, x.stride(0), residual.stride(0),
                                        h.stride(0), y.stride(0), x.shape[1], eps, BLOCK=block,
                                        num_warps=8 if block >= 4096 else 4, **pdl.kw())
    return h, y


def rms_norm_fused(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    # x: [T, D] -> [T, D]
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    if x.shape[0] == 0:
        return y
    block = triton.next_power_of_2(x.shape[1])
    _rms_norm_kernel[(x.shape[0],)](x, weight, y, x.stride(0), y.stride(0), x.shape[1], eps, BLOCK=block,
                                    num_warps=8 if block >= 4096 else 4, **pdl.kw())
    return y
