"""SwiGLU's elementwise half as one Triton kernel on CUDA (torch runs two: silu, then the product).

    swiglu_fused(h [T, 2I] bf16/fp16 (gate | up), inter) -> [T, I] = silu(gate) * up

Rounded as torch rounds: silu(g) = g / (1 + exp(-g)) in fp32 with libdevice's expf and an IEEE division (what
torch's CUDA silu computes), rounded to h's dtype, then the product in fp32, rounded again.
"""
from __future__ import annotations

import torch
from torch import Tensor

from dcpctl import knobs
from dcpctl.runtime.kernels import pdl
from dcpctl.runtime.kernels.norm_triton import triton

if triton is not None:
    import triton.language as tl
    from triton.language.extra import libdevice

    @triton.jit
    def _swiglu_kernel(H, Y, stride_h, stride_y, I,  # noqa: E741
                       BLOCK: tl.constexpr, LIBDEVICE: tl.constexpr, PDL: tl.constexpr):
        pdl.enter(PDL)
        t, b = tl.program_id(0), tl.program_id(1)
        cols = b * BLOCK + tl.arange(0, BLOCK)
        mask = cols < I
        dt = Y.dtype.element_ty
        g = tl.load(H + t * stride_h + cols, mask=mask, other=0.0).to(tl.float32)
        u = tl.load(H + t * stride_h + I + cols, mask=mask, other=0.0).to(tl.float32)
        if LIBDEVICE:
            e = libdevice.exp(-g)
        else:       # Triton's interpreter has no libdevice
            e = tl.exp(-g)
        s = tl.math.div_rn(g, 1.0 + e).to(dt).to(tl.float32)
        tl.store(Y + t * stride_y + cols, (s * u).to(dt), mask=mask)


def swiglu_kernel_ok(h: Tensor) -> bool:
    """Whether swiglu_fused takes h (else torch's silu and product run)."""
    return (triton is not None and h.is_cuda and h.dim() == 2 and h.dtype in (torch.bfloat16, torch.float16)
            and h.stride(1) == 1)


def swiglu_fused(h: Tensor, inter: int) -> Tensor:
    # h: [T, 2I] -> [T, I]
    y = torch.empty(h.shape[0], inter, dtype=h.dtype, device=h.device)
    if h.shape[0] == 0:
        return y
    block = min(1024, triton.next_power_of_2(inter))
    _swiglu_kernel[(h.shape[0], triton.cdiv(inter, block))](h, y, h.stride(0), y.stride(0), inter,
                                                            BLOCK=block,
                                                            LIBDEVICE=not knobs.get("TRITON_INTERPRET"),
                                                            num_warps=4, **pdl.kw())
    return y
