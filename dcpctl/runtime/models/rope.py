"""DeepSeek rotary embedding (plain and YaRN) and the MLA softmax scale.

Frequencies and angles are computed in the upcast dtype (fp32 exactly as Hugging Face does, or
float64 for float64 models); the rotation runs in the tensor's dtype (V3) or in the upcast dtype
(V2, `rope_fp32`, as HF's complex-fp32 rotation).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from dcpctl.runtime.models.config import MlaConfig, RopeSpec


def _mscale(scale: float, m: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def softmax_scale(cfg: MlaConfig) -> float:
    """1/sqrt(qk_head_dim), times YaRN's mscale(factor, mscale_all_dim)^2 (DeepSeek's correction)."""
    scale = cfg.qk_head_dim ** -0.5
    r = cfg.rope
    if r.kind != "default" and r.mscale_all_dim:
        scale *= _mscale(r.factor, r.mscale_all_dim) ** 2
    return scale


def _correction_dim(rotations: float, r: RopeSpec) -> float:
    return r.dim * math.log(r.original_max / (rotations * 2 * math.pi)) / (2 * math.log(r.theta))


def _yarn_inv_freq(r: RopeSpec, dt: torch.dtype) -> Tensor:
    # inv_freq: [dim/2]; low dims keep the original frequency, high dims are interpolated by factor
    pos_freqs = r.theta ** (torch.arange(0, r.dim, 2).to(dt) / r.dim)
    low, high = _correction_dim(r.beta_fast, r), _correction_dim(r.beta_slow, r)
    if r.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, r.dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(r.dim // 2, dtype=dt) - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp
    return (1.0 / (r.factor * pos_freqs)) * (1 - keep) + (1.0 / pos_freqs) * keep


def _attention_factor(r: RopeSpec) -> float:
    if r.kind == "default":
        return 1.0
    if r.attention_factor is not None:
        return float(r.attention_factor)
    if r.mscale and r.mscale_all_dim:
        return _mscale(r.factor, r.mscale) / _mscale(r.factor, r.mscale_all_dim)
    return _mscale(r.factor)


class Rotary:
    """cos/sin tables for positions, and the rotation of the rope part of q and k."""

    def __init__(self, cfg: MlaConfig, device: torch.device | str = "cpu",
                 upcast: torch.dtype = torch.float32):
        r = cfg.rope
        if r.kind == "yarn":
            inv = _yarn_inv_freq(r, upcast)
        else:
            inv = 1.0 / (r.theta ** (torch.arange(0, r.dim, 2, dtype=upcast) / r.dim))
        self.inv_freq = inv.to(device)
        self.att = _attention_factor(r)
        self.interleaved = r.interleaved
        self.upcast, self.math_upcast = upcast, cfg.rope_fp32

    def cos_sin(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        # positions: [T] -> cos, sin: [T, dim/2] in upcast (already scaled by YaRN's attention factor)
        freqs = positions[:, None] * self.inv_freq[None, :]   # one kernel: each position cast to upcast, then
                                                              # *
        if self.att == 1.0:      # x * 1.0 == x: two launches fewer per step without YaRN
            return freqs.cos(), freqs.sin()
        return freqs.cos() * self.att, freqs.sin() * self.att

    def apply(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        # x: [T, ..., dim]  cos/sin: [T, dim/2] -> [T, ..., dim] laid out as (rotated evens, rotated odds)
        dtype = self.upcast if self.math_upcast else x.dtype
        xc = x.to(dtype)
        shape = (cos.shape[0],) + (1,) * (x.dim() - 2) + (cos.shape[1],)
        c, s = cos.to(dtype).view(shape), sin.to(dtype).view(shape)
        half = x.shape[-1] // 2
        x1, x2 = (xc[..., 0::2], xc[..., 1::2]) if self.interleaved else (xc[..., :half], xc[..., half:])
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)
