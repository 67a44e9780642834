"""A block-FP8 weight dequantized on the GPU (one Triton launch), for the GEMMs of a prefill under w8a16.

    dequantize_gpu(w8 [N, K] e4m3, scale [ceil(N/b0), ceil(K/b1)] fp32, block, dtype) -> [N, K] dtype
    DequantLinear: the kernel choice (fp8_gemm.choose_tiles) that runs F.linear on that weight

Each element is `(e4m3 as fp32) x its block's factor`, rounded to `dtype`: what quant.dequantize and the
loader compute for the dequantized-bf16 path, bit for bit. So F.linear on it is the bf16 path's own GEMM
(cuBLAS, the same shapes), and its output is the bf16 path's: a prefill's many rows make the GEMM
compute-bound, where cuBLAS's bf16 MMA beats the FP8 kernel's in-register conversion, and writing plus reading
the bf16 copy costs about 3x the FP8 weight's bytes once.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from torch import Tensor


@dataclass(frozen=True)
class DequantLinear:
    """Dequantize the weight into a scratch of the rows' dtype (dequantize_gpu), then F.linear (cuBLAS)."""
    bn: int = 32     # weight rows a program converts
    bk: int = 128    # weight columns a program converts


@triton.jit
def _dequant_kernel(w_ptr, s_ptr, out_ptr, N, K, s_wn, s_sn, s_on,
                    B0: tl.constexpr, B1: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # w [N, K] e4m3 (row stride s_wn), s [ceil(N/B0), ceil(K/B1)] fp32 (row stride s_sn) -> out [N, K] (s_on)
    n = tl.program_id(0) * BN + tl.arange(0, BN)
    k = tl.program_id(1) * BK + tl.arange(0, BK)
    ok = (n < N)[:, None] & (k < K)[None, :]
    w = tl.load(w_ptr + n[:, None].to(tl.int64) * s_wn + k[None, :], mask=ok, other=0.0)
    s = tl.load(s_ptr + (n // B0)[:, None] * s_sn + (k // B1)[None, :], mask=ok, other=0.0)
    tl.store(out_ptr + n[:, None].to(tl.int64) * s_on + k[None, :],
             (w.to(tl.float32) * s).to(out_ptr.dtype.element_ty), mask=ok)


def dequantize_gpu(w8: Tensor, scale: Tensor, block: tuple[int, int], dtype: torch.dtype,
                   tiles: DequantLinear = DequantLinear()) -> Tensor:
    # w8: [N, K] e4m3 (unit column stride)  scale: [ceil(N/b0), ceil(K/b1)] -> [N, K] dtype
    N, K = w8.shape
    if w8.stride(1) != 1 or scale.stride(1) != 1:
        raise ValueError("dequantize_gpu: the weight and its factors need unit column strides")
    out = torch.empty((N, K), dtype=dtype, device=w8.device)
    grid = (triton.cdiv(N, tiles.bn), triton.cdiv(K, tiles.bk))
    _dequant_kernel[grid](w8, scale, out, N, K, w8.stride(0), scale.stride(0), out.stride(0),
                          B0=block[0], B1=block[1], BN=tiles.bn, BK=tiles.bk, num_warps=4)
    return out
