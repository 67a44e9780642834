"""The absorbed-MLA per-head products of a decode step (q_nope @ w_kc, o @ w_vc) as one Triton kernel on CUDA.

    head_bmm_ok(x, w, out) -> bool      whether head_bmm takes these (else torch.bmm runs)
    head_bmm(x [B, M, K], w [B, K, N], out [B, M, N])   out = x @ w per head b, M <= 64 rows (decode)

Why: at decode M is the batch (1-64) and the two products read 2 x 16.8 MB of weights per V3 layer (128
heads), which cuBLAS's batched kernels read well below the copy bandwidth.  Here each program streams one
head's [K, BLOCK_N] weight slab once for all M rows (x and out are the token-major views the model passes, any
strides). fp32 accumulation like cuBLAS, summed in another order (k blocks of BLOCK_K): not bit-equal to
torch.bmm, so the graph and the eager step both run it (the same rows go through the same kernel either way).
The tiles per K come from the GPU's head_bmm tuning table (dcpctl/tuning/head_bmm), else BUILT_IN.
"""
from __future__ import annotations

import functools

import torch
from torch import Tensor

from dcpctl.runtime.kernels import pdl
from dcpctl.runtime.kernels.norm_triton import triton

MAX_ROWS = 64    # decode batches; prefill (M up to the chunk) stays on cuBLAS

if triton is not None:
    import triton.language as tl

    @triton.jit
    def _head_bmm_kernel(X, W, O, M, sxb, sxm, swb, swk, sob, som,  # noqa: E741
                         K: tl.constexpr, N: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr,
                         BN: tl.constexpr, PDL: tl.constexpr):
        pdl.enter(PDL)
        b, nb = tl.program_id(0), tl.program_id(1)
        rows = tl.arange(0, BM)
        cols = nb * BN + tl.arange(0, BN)
        acc = tl.zeros([BM, BN], tl.float32)
        for k0 in range(0, K, BK):
            ks = k0 + tl.arange(0, BK)
            x = tl.load(X + b.to(tl.int64) * sxb + rows[:, None] * sxm + ks[None, :],
                        mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
            w = tl.load(W + b.to(tl.int64) * swb + ks[:, None] * swk + cols[None, :],
                        mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
            acc = tl.dot(x, w, acc)
        tl.store(O + b.to(tl.int64) * sob + rows[:, None] * som + cols[None, :], acc.to(O.dtype.element_ty),
                 mask=(rows[:, None] < M) & (cols[None, :] < N))


def head_bmm_ok(x: Tensor, w: Tensor, out: Tensor) -> bool:
    return (triton is not None and x.is_cuda and x.dtype in (torch.bfloat16, torch.float16)
            and w.dtype == x.dtype and out.dtype == x.dtype and x.dim() == 3 and 1 <= x.shape[1] <= MAX_ROWS
            and x.stride(2) == 1 and w.stride(2) == 1 and out.stride(2) == 1 and x.shape[2] >= 16
            and w.shape[2] >= 16)


# {"by_max_k": [[most K (null: any), {bn, bn_2_32_rows (2-32 rows; absent: bn), bk, warps, stages}], ...]}
BUILT_IN = {"by_max_k": [[128, {"bn": 128, "bn_2_32_rows": 256, "bk": 32, "warps": 4, "stages": 3}],
                         [None, {"bn": 64, "bk": 64, "warps": 4, "stages": 4}]]}


@functools.lru_cache(maxsize=None)
def _table(device: torch.device) -> dict:
    from dcpctl.runtime import tuned
    return tuned.table("head_bmm", device).data or BUILT_IN       # the device rule, said once


def default_config(m: int, k: int, n: int, device: torch.device | None = None) -> tuple[int, int, int, int]:
    """(BLOCK_N, BLOCK_K, num_warps, num_stages) for M rows of a [K, N] per-head weight on `device`'s
    table."""
    table = _table(device) if device is not None and device.type == "cuda" else BUILT_IN
    t = next(t for most, t in table["by_max_k"] if most is None or k <= most)
    bn = t.get("bn_2_32_rows", t["bn"]) if 1 < m <= 32 else t["bn"]
    return (min(bn, triton.next_power_of_2(n)), min(t["bk"], triton.next_power_of_2(k)), t["warps"],
            t["stages"])


def head_bmm(x: Tensor, w: Tensor, out: Tensor, config: tuple[int, int, int, int] | None = None) -> None:
    # x: [B, M, K]  w: [B, K, N]  out: [B, M, N]; config: default_config's tuple (a sweep's override)
    b, m, k = x.shape
    n = w.shape[2]
    bn, bk, warps, stages = config or default_config(m, k, n, x.device)
    bm = max(16, triton.next_power_of_2(m))
    _head_bmm_kernel[(b, triton.cdiv(n, bn))](x, w, out, m, x.stride(0), x.stride(1), w.stride(0),
                                              w.stride(1), out.stride(0), out.stride(1), K=k, N=n, BM=bm,
                                              BK=bk, BN=bn, num_warps=warps, num_stages=stages, **pdl.kw())
