"""The absorbed-MLA per-head products of a decode step (q_nope @ w_kc, o @ w_vc) as one Triton kernel on CUDA.

    head_bmm_ok(x, w, out) -> bool      whether head_bmm takes these (else torch.bmm runs)
    head_bmm(x [B, M, K], w [B, K, N], out [B, M, N])   out = x @ w per head b, M <= 64 rows (decode)
    merge_head_bmm(parts [S, M, B, K], lse [S, M, B], w, out)   the same product of the S split-KV partials'
                                                                  exact merge (the `merge_vc` fusion)

Why: at decode M is the batch (1-64) and the two products read 2 x 16.8 MB of weights per V3 layer (128 heads);
cuBLAS's batched kernels ran them at ~2.5 TB/s (13.3 us per layer at batch 1, 15.8 at batch 32, against 7.9 at
the copy bandwidth; benchmarks/data/h200_step_profile_fused_b*.json).  Here each program streams one head's
[K, BLOCK_N] weight slab once for all M rows (x and out are the token-major views the model passes, any strides).
fp32 accumulation like cuBLAS, summed in another order (k blocks of BLOCK_K): not bit-equal to torch.bmm, so the
graph and the eager step both run it (the same rows go through the same kernel either way).

merge_head_bmm: at DCP 1 a decode step's attention leaves S fp32 partials per (token, head) when the kernel splits
the context (triton_mla.choose_splits), and their merge was a launch of its own between the attention and the w_vc
product (3.6 us a layer at batch 8, 5.2 at 32; benchmarks/data/h200_step_profile_s12_b*.json). Here the w_vc product
merges them as it loads its rows: the merge kernel's formula (fused_merge._merge_kernel: weights exp(lse_s - lse),
empty or NaN shards never loaded), each merged row rounded to the weight's dtype as the merge kernel stores it, then
the same K loop as head_bmm. The splits are summed one by one, so the merged row may differ from the merge kernel's
in the last fp32 bit (its sum is a reduction over a tile).
"""
from __future__ import annotations

import torch
from torch import Tensor

from dcpctl.runtime.models.norm_triton import triton

MAX_ROWS = 64    # decode batches; prefill (M up to the chunk) stays on cuBLAS

if triton is not None:
    import triton.language as tl

    @triton.jit
    def _head_bmm_kernel(X, W, O, M, sxb, sxm, swb, swk, sob, som, K: tl.constexpr, N: tl.constexpr,
                         BM: tl.constexpr, BK: tl.constexpr, BN: tl.constexpr):
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


    @triton.jit
    def _merge_head_bmm_kernel(P, LSE, W, O, M, S, s_ps, s_pm, s_pb, s_ls, s_lm, s_lb, swb, swk, sob, som,
                               K: tl.constexpr, N: tl.constexpr, S_POW2: tl.constexpr, BM: tl.constexpr,
                               BK: tl.constexpr, BN: tl.constexpr):
        # P: [S, M, B, K] normalized partials  LSE: [S, M, B] base e  W: [B, K, N] -> O: [B, M, N]; grid (B, N / BN)
        b, nb = tl.program_id(0), tl.program_id(1)
        rows = tl.arange(0, BM)
        cols = nb * BN + tl.arange(0, BN)
        offs_s = tl.arange(0, S_POW2)
        lse = tl.load(LSE + offs_s[:, None] * s_ls + rows[None, :] * s_lm + b * s_lb,
                      mask=(offs_s[:, None] < S) & (rows[None, :] < M), other=float("-inf"))
        valid = (lse > float("-inf")) & (lse < float("inf"))            # NaN compares false
        mx = tl.max(tl.where(valid, lse, float("-inf")), 0)
        mx_safe = tl.where(mx > float("-inf"), mx, 0.0)
        total = tl.sum(tl.where(valid, tl.exp(lse - mx_safe[None, :]), 0.0), 0)
        merged = tl.where(total > 0, mx_safe + tl.log(tl.where(total > 0, total, 1.0)), float("-inf"))
        wt = tl.where(valid, tl.exp(tl.where(valid, lse, 0.0) - merged[None, :]), 0.0)     # [S_POW2, BM]
        acc = tl.zeros([BM, BN], tl.float32)
        for k0 in range(0, K, BK):
            ks = k0 + tl.arange(0, BK)
            x = tl.zeros([BM, BK], tl.float32)
            for sp in range(S_POW2):     # splits past S have weight 0: nothing loaded
                w_s = tl.sum(tl.where(offs_s[:, None] == sp, wt, 0.0), 0)             # split sp's weight per row
                p = tl.load(P + sp * s_ps + rows[:, None] * s_pm + b.to(tl.int64) * s_pb + ks[None, :],
                            mask=(w_s > 0)[:, None] & (ks[None, :] < K), other=0.0)
                x += p * w_s[:, None]
            w = tl.load(W + b.to(tl.int64) * swb + ks[:, None] * swk + cols[None, :],
                        mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
            acc = tl.dot(x.to(W.dtype.element_ty), w, acc)
        tl.store(O + b.to(tl.int64) * sob + rows[:, None] * som + cols[None, :], acc.to(O.dtype.element_ty),
                 mask=(rows[:, None] < M) & (cols[None, :] < N))


def head_bmm_ok(x: Tensor, w: Tensor, out: Tensor) -> bool:
    return (triton is not None and x.is_cuda and x.dtype in (torch.bfloat16, torch.float16)
            and w.dtype == x.dtype and out.dtype == x.dtype and x.dim() == 3 and 1 <= x.shape[1] <= MAX_ROWS
            and x.stride(2) == 1 and w.stride(2) == 1 and out.stride(2) == 1 and x.shape[2] >= 16
            and w.shape[2] >= 16)


def default_config(m: int, k: int, n: int) -> tuple[int, int, int, int]:
    """(BLOCK_N, BLOCK_K, num_warps, num_stages) for M rows of a [K, N] per-head weight.

    From the H200 sweep of benchmarks/head_bmm_sweep.py (eleventh session, data
    benchmarks/data/h200_head_bmm_sweep_s11.json; us at M = 1 / 8 / 32, the setting before -> this one):
    w_kc (K 128, N 512) 7.21 / 6.98 / 7.81 -> 6.47 / 6.32 / 7.05, w_vc (K 512, N 128) 7.01 / 7.05 / 7.34 ->
    6.45 / 6.41 / 7.00; torch.bmm 6.55 / 6.85 / 7.38 and 6.73 / 6.73 / 6.87 in the same run."""
    if k <= 128:    # short K: narrow K steps, N slabs of 256 for 2-32 rows (swept up to 32; 33-64 keep 128)
        return min(256 if 1 < m <= 32 else 128, triton.next_power_of_2(n)), min(32, triton.next_power_of_2(k)), 4, 3
    return min(64, triton.next_power_of_2(n)), min(64, triton.next_power_of_2(k)), 4, 4


def head_bmm(x: Tensor, w: Tensor, out: Tensor, config: tuple[int, int, int, int] | None = None) -> None:
    # x: [B, M, K]  w: [B, K, N]  out: [B, M, N]; config: default_config's tuple (a sweep's override)
    b, m, k = x.shape
    n = w.shape[2]
    bn, bk, warps, stages = config or default_config(m, k, n)
    bm = max(16, triton.next_power_of_2(m))
    _head_bmm_kernel[(b, triton.cdiv(n, bn))](x, w, out, m, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                                              out.stride(0), out.stride(1), K=k, N=n, BM=bm, BK=bk, BN=bn,
                                              num_warps=warps, num_stages=stages)


def merge_head_bmm_ok(parts: Tensor, lse: Tensor, w: Tensor, out: Tensor) -> bool:
    """Whether merge_head_bmm takes these: fp32 partials [S, M, B, K] (unit last stride), their lse [S, M, B], and
    head_bmm's conditions on w and out ([B, K, N], [B, M, N])."""
    return (triton is not None and parts.is_cuda and parts.dtype == torch.float32 and parts.dim() == 4
            and lse.dtype == torch.float32 and lse.shape == parts.shape[:3] and parts.stride(3) == 1
            and w.dtype in (torch.bfloat16, torch.float16) and out.dtype == w.dtype and w.dim() == 3
            and w.shape[0] == parts.shape[2] and w.shape[1] == parts.shape[3] and 1 <= parts.shape[1] <= MAX_ROWS
            and w.stride(2) == 1 and out.stride(2) == 1 and w.shape[2] >= 16 and parts.shape[3] >= 16)


MERGE_CONFIG = (128, 64, 4, 3)   # (BLOCK_N, BLOCK_K, num_warps, num_stages) for the w_vc product (K 512, N 128)


def merge_head_bmm(parts: Tensor, lse: Tensor, w: Tensor, out: Tensor,
                   config: tuple[int, int, int, int] | None = None) -> None:
    # parts: [S, M, B, K] fp32 (base-e lse [S, M, B])  w: [B, K, N]  out: [B, M, N] = merge(parts) @ w per head b
    s, m, b, k = parts.shape
    n = w.shape[2]
    bn, bk, warps, stages = config or MERGE_CONFIG
    bn, bk = min(bn, triton.next_power_of_2(n)), min(bk, triton.next_power_of_2(k))
    _merge_head_bmm_kernel[(b, triton.cdiv(n, bn))](
        parts, lse, w, out, m, s, parts.stride(0), parts.stride(1), parts.stride(2), lse.stride(0), lse.stride(1),
        lse.stride(2), w.stride(0), w.stride(1), out.stride(0), out.stride(1), K=k, N=n,
        S_POW2=triton.next_power_of_2(s), BM=max(16, triton.next_power_of_2(m)), BK=bk, BN=bn,
        num_warps=warps, num_stages=stages)
