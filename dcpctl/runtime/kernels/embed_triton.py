"""The embedding lookup of this rank's vocab slice as one Triton kernel on CUDA (torch runs ~8 small ones:
the offset, two compares, an and, a clamp, the gather, a where).

    embed_rows(ids [T] int64, embed [n, D], start) -> [T, D]: embed[ids - start] where 0 <= ids - start < n,
        else 0

A copy: bit-identical to DeepseekModel's torch form (rows outside the slice are exact zeros before the
vocab all-reduce).
"""
from __future__ import annotations

import torch
from torch import Tensor

from dcpctl.runtime.kernels.norm_triton import triton

if triton is not None:
    import triton.language as tl

    @triton.jit
    def _embed_kernel(IDS, E, Y, start, n, D, stride_e, stride_y, BLOCK: tl.constexpr):
        t, b = tl.program_id(0), tl.program_id(1)
        local = tl.load(IDS + t) - start
        mine = (local >= 0) & (local < n)
        row = tl.minimum(tl.maximum(local, 0), n - 1)
        cols = b * BLOCK + tl.arange(0, BLOCK)
        mask = cols < D
        v = tl.load(E + row * stride_e + cols, mask=mask & mine, other=0.0)
        tl.store(Y + t * stride_y + cols, v, mask=mask)


def embed_kernel_ok(ids: Tensor, embed: Tensor) -> bool:
    """Whether embed_rows takes these operands (else the torch form runs)."""
    return triton is not None and ids.is_cuda and embed.is_cuda and ids.dim() == 1 and embed.stride(1) == 1


def embed_rows(ids: Tensor, embed: Tensor, start: int) -> Tensor:
    # ids: [T] -> [T, D]
    y = torch.empty(ids.shape[0], embed.shape[1], dtype=embed.dtype, device=embed.device)
    if ids.shape[0] == 0:
        return y
    block = min(2048, triton.next_power_of_2(embed.shape[1]))
    _embed_kernel[(ids.shape[0], triton.cdiv(embed.shape[1], block))](ids, embed, y, start, embed.shape[0],
                                                                      embed.shape[1], embed.stride(0),
                                                                      y.stride(0), BLOCK=block, num_warps=4)
    return y
