"""The MHA form's keys of one key block in one pass: k = [K nope of each head | the row's shared rotated
k_pe].

    keys(kv [s, H, nope + v], k_pe [s, rope], nope) -> k [s, H, nope + rope]

kv is kv_b_proj's output for the block's latent rows (K nope then V per head), k_pe the rows' rope part (a
strided view of the latent rows).  The torch form is two copies, the nope slice (strided) and k_pe broadcast
over the heads; on CUDA one Triton kernel reads each once and writes k once (at 4K rows x 128 heads the two
copies took 230 us a layer on an H200, benchmarks/prefill_ttft.py --profile).  A copy either way: the result
is bit-identical.
"""
from __future__ import annotations

import torch
from torch import Tensor

from dcpctl.runtime.kernels.norm_triton import triton

ROWS, HEADS = 16, 16      # rows and heads per program


def keys_torch(kv: Tensor, k_pe: Tensor, nope: int) -> Tensor:
    s, h = kv.shape[:2]
    k = torch.empty(s, h, nope + k_pe.shape[1], dtype=kv.dtype, device=kv.device)
    k[..., :nope].copy_(kv[..., :nope])                 # two plain copies: a cat with a broadcast k_pe runs
    k[..., nope:].copy_(k_pe.unsqueeze(1))              # torch's slow cat path
    return k


def kernel_ok(kv: Tensor, k_pe: Tensor) -> bool:
    return (triton is not None and kv.is_cuda and kv.dtype == k_pe.dtype and kv.stride(-1) == 1
            and k_pe.stride(-1) == 1)


def keys(kv: Tensor, k_pe: Tensor, nope: int) -> Tensor:
    """k [s, H, nope + rope] (module docstring): the Triton kernel on CUDA, else the two torch copies."""
    if not kernel_ok(kv, k_pe):
        return keys_torch(kv, k_pe, nope)
    return keys_triton(kv, k_pe, nope)


def keys_triton(kv: Tensor, k_pe: Tensor, nope: int) -> Tensor:
    s, h = kv.shape[:2]
    rope = k_pe.shape[1]
    k = torch.empty(s, h, nope + rope, dtype=kv.dtype, device=kv.device)
    if s == 0:
        return k
    _keys_kernel[(triton.cdiv(s, ROWS), triton.cdiv(h, HEADS))](
        kv, k_pe, k, s, h, kv.stride(0), kv.stride(1), k_pe.stride(0), k.stride(0), k.stride(1),
        NOPE=nope, ROPE=rope, BN=triton.next_power_of_2(nope), BR=triton.next_power_of_2(rope), BS=ROWS,
        BH=HEADS, num_warps=4)
    return k


if triton is not None:
    import triton.language as tl

    @triton.jit
    def _keys_kernel(KV, PE, K, S, H, s_kv0, s_kv1, s_pe0, s_k0, s_k1, NOPE: tl.constexpr, ROPE: tl.constexpr,
                     BN: tl.constexpr, BR: tl.constexpr, BS: tl.constexpr, BH: tl.constexpr):
        rows = tl.program_id(0) * BS + tl.arange(0, BS)
        cn = tl.arange(0, BN)
        cr = tl.arange(0, BR)
        rmask = rows < S
        nmask = rmask[:, None] & (cn[None, :] < NOPE)
        pmask = rmask[:, None] & (cr[None, :] < ROPE)
        pe = tl.load(PE + rows[:, None] * s_pe0 + cr[None, :], mask=pmask)      # read once for BH heads
        for i in range(BH):
            h = tl.program_id(1) * BH + i
            ok = h < H
            x = tl.load(KV + rows[:, None] * s_kv0 + h * s_kv1 + cn[None, :], mask=nmask & ok)
            out = K + rows[:, None] * s_k0 + h * s_k1
            tl.store(out + cn[None, :], x, mask=nmask & ok)
            tl.store(out + NOPE + cr[None, :], pe, mask=pmask & ok)
