"""Small tensor ops shared by the model: HF-exact RMSNorm (the collectives are runtime/collectives.py)."""
from __future__ import annotations

import torch
from torch import Tensor

from dcpctl.runtime.kernels.norm_triton import add_rms_norm_fused, fused_norm_ok, rms_norm_fused


def upcast_dtype(dtype: torch.dtype, hf_numerics: bool = False) -> torch.dtype:
    """Dtype of norms, rope angles and the router: fp32 as in Hugging Face, except float64 stays
    float64 so that exactness tests do not depend on fp32 rounding (which varies with batch shape)."""
    return torch.float64 if dtype == torch.float64 and not hf_numerics else torch.float32


def rms_norm(x: Tensor, weight: Tensor, eps: float, upcast: torch.dtype = torch.float32) -> Tensor:
    # x: [T, D] -> [T, D]; normalized in `upcast`, cast back before the weight (as Hugging Face)
    if fused_norm_ok(x, weight, upcast):    # CUDA bf16/fp16: one kernel instead of eight (norm_triton.py)
        return rms_norm_fused(x, weight, eps)
    return rms_norm_torch(x, weight, eps, upcast)


def add_rms_norm(x: Tensor, residual: Tensor, weight: Tensor, eps: float, upcast: torch.dtype = torch.float32,
                 fused: bool = True) -> tuple[Tensor, Tensor]:
    # x, residual: [T, D] -> (h = residual + x, rms_norm(h)); one kernel on CUDA bf16/fp16 when `fused`
    if fused and fused_norm_ok(x, weight, upcast) and residual.dtype == x.dtype and residual.stride(1) == 1:
        return add_rms_norm_fused(x, residual, weight, eps)
    h = residual + x
    return h, rms_norm(h, weight, eps, upcast)


def rms_norm_torch(x: Tensor, weight: Tensor, eps: float, upcast: torch.dtype = torch.float32) -> Tensor:
    xf = x.to(upcast)
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)
