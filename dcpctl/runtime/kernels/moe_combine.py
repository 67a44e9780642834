"""The routed experts' combine: each token's k expert rows, weighted by the router, summed in fp32 (float64
models: float64).

    moe_combine(y [R, D], order [T*k], ends [E], w [T, k]) -> [T, D]

y holds the experts' output rows sorted by expert (row i is the flat (token, slot) pair order[i] = tok * k +
slot); rows at and past ends[-1] belong to other ranks' experts (expert parallelism) and are left unset by the
GEMMs, so they count as zero.  out[t] = sum_j w[t, j] * y[inv[t * k + j]], inv the inverse of order, summed in
slot order in the wider of y's and w's dtypes (fp32 for bf16 rows, float64 for a float64 model) and rounded
once to y's dtype.

The combine SGLang and vLLM run after their fused MoE (moe_sum over a [T, k, D] buffer) and Hugging Face's
fp32 accumulator, without the atomics of index_add_ (a bf16 atomic add per element and slot, in any order): on
CUDA one Triton pass reads each row once; elsewhere the same in torch ops.
"""
from __future__ import annotations

import torch
from torch import Tensor

from dcpctl.runtime.kernels import pdl
from dcpctl.runtime.kernels.norm_triton import triton

if triton is not None:
    import triton.language as tl

    @triton.jit
    def _combine_kernel(Y, INV, W, ENDS, OUT, D, last, K: tl.constexpr, BLOCK: tl.constexpr,
                        PDL: tl.constexpr):
        pdl.enter(PDL)
        t, b = tl.program_id(0), tl.program_id(1)
        cols = b * BLOCK + tl.arange(0, BLOCK)
        mask = cols < D
        valid = tl.load(ENDS + last)                # rows of this rank's experts end here
        acc = tl.zeros([BLOCK], tl.float32)
        for j in tl.static_range(K):
            r = tl.load(INV + t * K + j)
            wj = tl.load(W + t * K + j).to(tl.float32)
            row = tl.load(Y + r.to(tl.int64) * D + cols, mask=mask & (r < valid), other=0.0).to(tl.float32)
            acc += row * wj
        tl.store(OUT + t.to(tl.int64) * D + cols, acc.to(OUT.dtype.element_ty), mask=mask)


def inverse(order: Tensor) -> Tensor:
    """inv with inv[order[i]] = i: where each (token, slot) row sits in the sorted rows (no host sync)."""
    inv = torch.empty_like(order)
    inv[order] = torch.arange(order.numel(), device=order.device, dtype=order.dtype)
    return inv


def combine_kernel_ok(y: Tensor, w: Tensor) -> bool:
    """Whether moe_combine runs the Triton pass (CUDA, 16-bit rows, fp32 weights)."""
    return (triton is not None and y.is_cuda and y.dtype in (torch.bfloat16, torch.float16)
            and w.dtype == torch.float32 and y.is_contiguous())


def moe_combine(y: Tensor, order: Tensor, ends: Tensor, w: Tensor) -> Tensor:
    T, k = w.shape
    inv = inverse(order)
    if combine_kernel_ok(y, w):
        return _combine_triton(y, inv, ends, w.contiguous())
    return combine_reference(y, inv, ends, w)


def combine_reference(y: Tensor, inv: Tensor, ends: Tensor, w: Tensor) -> Tensor:
    """The same in torch ops, summed in the wider of y's and w's dtypes (the CPU path, and the GPU tests'
    reference)."""
    T, k = w.shape
    rows = y[inv]
    rows = torch.where((inv < ends[-1:]).unsqueeze(1), rows, 0).view(T, k, y.shape[1])
    acc = torch.promote_types(y.dtype, w.dtype)
    return (rows.to(acc) * w.to(acc).unsqueeze(2)).sum(1).to(y.dtype)


def _combine_triton(y: Tensor, inv: Tensor, ends: Tensor, w: Tensor) -> Tensor:
    T, k = w.shape
    D = y.shape[1]
    out = torch.empty(T, D, dtype=y.dtype, device=y.device)
    if T == 0:
        return out
    block = min(1024, triton.next_power_of_2(D))
    _combine_kernel[(T, triton.cdiv(D, block))](y, inv, w, ends, out, D, ends.numel() - 1, K=k, BLOCK=block,
                                                num_warps=4, **pdl.kw())
    return out
