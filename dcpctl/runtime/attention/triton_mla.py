"""Local MLA decode over one rank's paged latent shard: a split-KV Triton kernel and its torch reference.

Local row j of rank r (of a DCP group of size c) holds global position j*c + r, so a query at
global position p sees the prefix of local rows j < n_vis = min(len_b, (p - r + c) // c).
Every function here returns `MLAOut(o [N, H, v_dim], lse [N, H] fp32, base="e")`; a row that sees
no key has lse = -inf and o = 0.  The latent row is [v_dim | rope] (R = v_dim + rope); scores use all
R columns, values the first v_dim.  An fp8 (e4m3) pool carries one per-tensor scale: kv = pool * kv_scale.

Kernel (flash-decoding): grid (head block, split, query row); each program streams its KV chunk,
keeps an online softmax in base 2 and writes a normalized partial (o, lse) per split; the splits are
merged exactly by `fused_merge.merge_partials` (skipped when there is one split).
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import torch
from torch import Tensor

from dcpctl.runtime.attention.fused_merge import check_destination, merge_partials, store_owner_major
from dcpctl.runtime.attention.gluon_mla import gluon_available, tma_descriptors
from dcpctl.runtime.attention.kernel_choice import announce, mark_failed, use_gluon
from dcpctl.runtime.gpu import gpu_facts
from dcpctl.runtime.attention.kernel_config import KernelConfig, default_config, tuned_configs  # noqa: F401
from dcpctl.runtime.attention.local import attention_mask, local_attention
from dcpctl.runtime.kernels import pdl

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU CI: the reference path only
    triton = None


class MLAOut(NamedTuple):
    o: Tensor      # [N, H, v_dim]
    lse: Tensor    # [N, H] fp32 (float64 from the reference on float64 inputs)
    base: str      # "e" from these kernels; "2" from FlashInfer (flashinfer_mla), which the merge takes


def _dequant(kv: Tensor, kv_scale: float | None, dt: torch.dtype) -> Tensor:
    # kv: [..., R] any float dtype -> [..., R] dt, fp8 pools scaled by their per-tensor scale
    kv = kv.to(dt)
    return kv * kv_scale if kv_scale is not None else kv


def mla_decode_reference(q: Tensor, kv_pool: Tensor, block_table: Tensor, local_lens: Tensor, row_req: Tensor,
                         q_pos: Tensor, *, scale: float, v_dim: int, dcp_rank: int = 0, dcp_size: int = 1,
                         kv_scale: float | None = None, out_dtype: torch.dtype | None = None,
                         out: tuple[Tensor, Tensor] | None = None, **_: object) -> MLAOut:
    """Torch reference (same signature as `mla_decode`): gathers the pages and calls `local_attention`."""
    # q: [N, H, R]  kv_pool: [pages, P, R]  block_table: [B, max_pages]  local_lens: [B]  row_req, q_pos: [N]
    dt = torch.float64 if q.dtype == torch.float64 else torch.float32
    page = kv_pool.shape[1]
    rows, pos, seq = [], [], []
    for b in range(block_table.shape[0]):
        j = torch.arange(int(local_lens[b]), device=q.device)
        rows.append(_dequant(kv_pool[block_table[b, j // page].long(), j % page], kv_scale, dt))
        pos.append(j * dcp_size + dcp_rank)
        seq.append(torch.full_like(j, b))
    kv = torch.cat(rows)
    mask = attention_mask(q_pos.long(), row_req.long(), torch.cat(pos), torch.cat(seq))
    o, lse = local_attention(q.to(dt), kv, mask, scale, v_dim)
    if out is not None:
        store_owner_major(out, o.flatten(0, 1), lse.flatten())
        return MLAOut(*out, "e")
    return MLAOut(o.to(out_dtype or torch.float32) if dt != torch.float64 else o, lse, "e")


def triton_available(device: torch.device) -> bool:
    return triton is not None and device.type == "cuda"


def mla_decode(q: Tensor, kv_pool: Tensor, block_table: Tensor, local_lens: Tensor, row_req: Tensor,
               q_pos: Tensor, *, scale: float, v_dim: int, dcp_rank: int = 0, dcp_size: int = 1,
               kv_scale: float | None = None, out_dtype: torch.dtype | None = None,
               max_local_len: int | None = None, num_splits: int | None = None,
               config: KernelConfig | None = None, out: tuple[Tensor, Tensor] | None = None,
               descriptors: dict | None = None) -> MLAOut:
    """Local MLA decode: Triton on CUDA when triton imports, else the torch reference.

    q [N, H, R] bf16/fp16; kv_pool [pages, P, R] bf16/fp16 or float8_e4m3fn with `kv_scale`;
    block_table [B, max_pages] int32; local_lens [B]; row_req [N] (query row -> request);
    q_pos [N] global positions.  Returns MLAOut(o [N, H, v_dim] in out_dtype (default fp32),
    lse [N, H] fp32 base e, "e").  `max_local_len` avoids a device sync when given.
    out: a destination (o [c, N, H/c, v_dim], lse [c, N, H/c]; any strides, e.g. the views of
    `comm.send_buffer`): head h of row n is written to [h // (H/c), n, h % (H/c)], and the views are returned.
    descriptors: a dict owned by the pool (KVPool.descriptors) in which the kernels' bulk-copy descriptors
    are kept per pool view (~20 us of host time a layer otherwise); None builds them on every call.
    """
    # q: [N, H, R]  kv_pool: [pages, P, R] -> o [N, H, v_dim], lse [N, H]
    if not triton_available(q.device):
        return mla_decode_reference(q, kv_pool, block_table, local_lens, row_req, q_pos, scale=scale, v_dim=v_dim,
                                    dcp_rank=dcp_rank, dcp_size=dcp_size, kv_scale=kv_scale, out_dtype=out_dtype,
                                    out=out)
    return mla_decode_triton(q, kv_pool, block_table, local_lens, row_req, q_pos, scale=scale, v_dim=v_dim,
                             dcp_rank=dcp_rank, dcp_size=dcp_size, kv_scale=kv_scale, out_dtype=out_dtype,
                             max_local_len=max_local_len, num_splits=num_splits, config=config, out=out,
                             descriptors=descriptors)


@functools.lru_cache(maxsize=4096)     # pure; every layer of a step asks the same question
def choose_splits(rows: int, head_blocks: int, max_len: int, block_n: int, sms: int, overhead: int = 96) -> int:
    """Splits per (row, head block): least time for waves of ~one CTA per SM, each CTA costing its chunk
    plus `overhead` tokens' worth (launch, q load, partial write and merge)."""
    best, best_cost = 1, math.inf
    for s in range(1, 129):
        chunk = math.ceil(math.ceil(max_len / s) / block_n) * block_n
        if s > 1 and chunk * (s - 1) >= max_len:    # a split would be empty
            continue
        cost = math.ceil(rows * head_blocks * s / sms) * (chunk + overhead)
        if cost < best_cost * 0.97:
            best, best_cost = s, cost
    return best


def padded(d: int) -> int:
    """A latent part's width as the Triton kernel's tiles hold it: the next power of two, at least 16."""
    return max(16, 1 << (d - 1).bit_length())


MAX_PADDED = (512, 256)   # v and rope widths (padded) the kernel's register tiles are sized for


def kernel_takes(v_dim: int, row: int) -> bool:
    """Whether the Triton kernel takes this latent row (DeepSeek/Kimi: 512 + 64; tiny models: 32 + 8)."""
    return 1 <= v_dim and padded(v_dim) <= MAX_PADDED[0] and 1 <= row - v_dim and padded(row - v_dim) <= MAX_PADDED[1]


def _check(q: Tensor, kv_pool: Tensor, v_dim: int, kv_scale: float | None) -> torch.dtype:
    # q: [N, H, R]  kv_pool: [pages, P, R] -> compute dtype of the dots
    r, rope = kv_pool.shape[-1], kv_pool.shape[-1] - v_dim
    if q.shape[-1] != r:
        raise ValueError(f"q row ({q.shape[-1]}) != kv row ({r})")
    if v_dim < 1 or rope < 1:
        raise ValueError(f"the latent row {r} must split into v_dim ({v_dim}) >= 1 and rope ({rope}) >= 1")
    fp8 = kv_pool.dtype == torch.float8_e4m3fn
    if fp8 and kv_scale is None:
        raise ValueError("an fp8 KV pool needs kv_scale")
    return torch.bfloat16 if fp8 else kv_pool.dtype


def mla_decode_triton(q: Tensor, kv_pool: Tensor, block_table: Tensor, local_lens: Tensor, row_req: Tensor,
                      q_pos: Tensor, *, scale: float, v_dim: int, dcp_rank: int = 0, dcp_size: int = 1,
                      kv_scale: float | None = None, out_dtype: torch.dtype | None = None,
                      max_local_len: int | None = None, num_splits: int | None = None,
                      config: KernelConfig | None = None, out: tuple[Tensor, Tensor] | None = None,
                      descriptors: dict | None = None) -> MLAOut:
    # q: [N, H, R]  kv_pool: [pages, P, R] -> o [N, H, v_dim], lse [N, H] base e (or the `out` views)
    cdt = _check(q, kv_pool, v_dim, kv_scale)
    cfg = config or default_config(q.shape[1], q.device)
    n, h, r = q.shape
    q = q.to(cdt).contiguous()
    if not kv_pool.is_contiguous():      # a temporary copy: its descriptors must not be kept
        kv_pool, descriptors = kv_pool.contiguous(), None
    if max_local_len is None:
        max_local_len = int(local_lens.max()) if local_lens.numel() else 0
    head_blocks = triton.cdiv(h, cfg.block_h)
    sms = gpu_facts(q.device).sms if q.is_cuda else 132
    s = num_splits or choose_splits(n, head_blocks, max(max_local_len, 1), cfg.block_n, sms * cfg.occupancy)
    if out is not None:
        check_destination(out, n, h, v_dim)
    if s == 1 and out is not None:   # one split: the kernel writes the destination itself
        do, dl = out
    else:                            # partials [s, n, h, .] as one block of h heads (merged below)
        do = torch.empty(s, n, h, v_dim, dtype=torch.float32 if s > 1 else (out_dtype or torch.float32),
                         device=q.device)
        dl = torch.empty(s, n, h, dtype=torch.float32, device=q.device)
    launch = (cfg, q, kv_pool, block_table, local_lens, row_req, q_pos, do, dl, h, dcp_rank, dcp_size, scale, kv_scale,
              head_blocks, s, v_dim, descriptors)
    if not (use_gluon(cfg, kv_pool, v_dim, kv_scale) and _launch_gluon(*launch)):
        _launch_triton(*launch)
    if config is None:      # after the launch: a Gluon build failure has already switched it to Triton
        announce(q.shape[1], cfg, kv_pool.device, kv_pool.dtype, kv_pool.shape[-1], v_dim, kv_scale)
    if s == 1:
        return MLAOut(do, dl, "e") if out is not None else MLAOut(do[0], dl[0], "e")
    mo, ml = merge_partials(do.view(s, n * h, v_dim), dl.view(s, n * h), out_dtype=out_dtype or torch.float32,
                            out=out)
    return MLAOut(mo, ml, "e") if out is not None else MLAOut(mo.view(n, h, v_dim), ml.view(n, h), "e")


def _descriptors(kind: str, kv_pool: Tensor, block_n: int, v_dim: int, cache: dict | None) -> tuple:
    """The v and rope tile descriptors over the pool's rows; kept in `cache` (the pool's own dict, so they
    live as long as the pool) per pool view and tile.  A descriptor is an address, shape, strides and tile."""
    key = (kind, kv_pool.data_ptr(), tuple(kv_pool.shape), tuple(kv_pool.stride()), kv_pool.dtype, block_n, v_dim)
    d = cache.get(key) if cache is not None else None
    if d is None:
        if kind == "gluon":
            d = tma_descriptors(kv_pool, block_n, v_dim)
        else:
            from triton.tools.tensor_descriptor import TensorDescriptor
            flat = kv_pool.view(-1, kv_pool.shape[-1])
            d = (TensorDescriptor.from_tensor(flat, [block_n, v_dim]),
                 TensorDescriptor.from_tensor(flat, [block_n, kv_pool.shape[-1] - v_dim]))
        if cache is not None:
            cache[key] = d
    return d


def _launch_gluon(cfg: KernelConfig, q: Tensor, kv_pool: Tensor, block_table: Tensor, local_lens: Tensor,
                  row_req: Tensor, q_pos: Tensor, do: Tensor, dl: Tensor, h: int, dcp_rank: int, dcp_size: int,
                  scale: float, kv_scale: float | None, head_blocks: int, s: int, v_dim: int,
                  descriptors: dict | None) -> bool:
    """The Gluon kernel into do/dl (kv_scale is None or 1 here: use_gluon); False, and the Triton kernel
    for cfg from then on, when it does not build here."""
    n, r = q.shape[0], q.shape[2]
    use_tma = kv_pool.shape[1] % cfg.block_n == 0
    kvd_v, kvd_pe = _descriptors("gluon", kv_pool, cfg.block_n, v_dim, descriptors) if use_tma else (kv_pool, kv_pool)
    try:
        _gluon_mla_kernel[(head_blocks, s, n)](
            q, kv_pool, kvd_v, kvd_pe, block_table, local_lens, row_req, q_pos, do, dl,
            q.stride(0), q.stride(1), kv_pool.stride(0), kv_pool.stride(1), block_table.stride(0),
            do.stride(0), do.stride(1), do.stride(2), dl.stride(0), dl.stride(1), dl.stride(2), do.shape[2],
            h, dcp_rank, dcp_size, scale * 1.4426950408889634,
            PAGE=kv_pool.shape[1], D_V=v_dim, D_PE=r - v_dim, BLOCK_H=cfg.block_h, BLOCK_N=cfg.block_n,
            STAGES=cfg.num_stages, USE_TMA=use_tma, num_warps=cfg.num_warps, **pdl.kw())
    except (CompilationError, OutOfResources) as e:     # a Gluon/driver this kernel was not built for
        mark_failed(cfg, f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:160]}")
        return False
    return True


def _launch_triton(cfg: KernelConfig, q: Tensor, kv_pool: Tensor, block_table: Tensor, local_lens: Tensor,
                   row_req: Tensor, q_pos: Tensor, do: Tensor, dl: Tensor, h: int, dcp_rank: int, dcp_size: int,
                   scale: float, kv_scale: float | None, head_blocks: int, s: int, v_dim: int,
                   descriptors: dict | None) -> None:
    n, r = q.shape[0], q.shape[2]
    d_vp, d_pep = padded(v_dim), padded(r - v_dim)
    use_tma = (cfg.tma and kv_pool.element_size() == 2 and kv_pool.shape[1] % cfg.block_n == 0
               and (d_vp, d_pep) == (v_dim, r - v_dim))         # bulk copies take whole rows only
    kvd_v = kvd_pe = kv_pool
    if use_tma:
        kvd_v, kvd_pe = _descriptors("triton", kv_pool, cfg.block_n, v_dim, descriptors)
    _mla_split_kernel[(head_blocks, s, n)](
        q, kv_pool, kvd_v, kvd_pe, block_table, local_lens, row_req, q_pos, do, dl,
        q.stride(0), q.stride(1), kv_pool.stride(0), kv_pool.stride(1), block_table.stride(0),
        do.stride(0), do.stride(1), do.stride(2), dl.stride(0), dl.stride(1), dl.stride(2), do.shape[2],
        h, dcp_rank, dcp_size, scale * float(kv_scale or 1.0) * 1.4426950408889634, float(kv_scale or 1.0),
        PAGE=kv_pool.shape[1], D_V=v_dim, D_PE=r - v_dim, D_VP=d_vp, D_PEP=d_pep, BLOCK_H=cfg.block_h,
        BLOCK_N=cfg.block_n, IS_FP8=kv_pool.dtype == torch.float8_e4m3fn, USE_TMA=use_tma, LAZY=cfg.lazy, WS=cfg.ws and use_tma,
        PREC="ieee" if kv_pool.dtype == torch.float32 else "tf32", num_warps=cfg.num_warps, num_stages=cfg.num_stages)


if gluon_available():
    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import OutOfResources

    from dcpctl.runtime.attention.gluon_mla import _mla_gluon_kernel as _gluon_mla_kernel

if triton is not None:
    from dcpctl.runtime.attention.kernel_rows import visible_range

    @triton.jit
    def _attend(q_v, q_pe, k_v, k_pe, jmask, m, l_sum, acc, qk_scale2, LAZY: tl.constexpr, PREC: tl.constexpr):
        # one KV tile: scores in base 2, online softmax, acc += p @ v (v = the first D_V columns of the row)
        # LAZY: keep a stale running max until some row's max grows by more than 8 (so p <= 2^8; exact
        # after the final normalization); the acc rescale is skipped on most tiles
        # PREC: "ieee" for fp32 pools (tl.dot would round fp32 operands to tf32), Triton's default otherwise
        qk = tl.dot(q_v, tl.trans(k_v), input_precision=PREC) + tl.dot(q_pe, tl.trans(k_pe), input_precision=PREC)
        qk = tl.where(jmask[None, :], qk * qk_scale2, float("-inf"))
        m_new = tl.maximum(m, tl.max(qk, 1))
        if LAZY:
            grow = tl.max(tl.where(m_new > m, m_new - m, 0.0), 0) > 8.0     # -inf -> finite counts as inf
            if grow:
                alpha = tl.exp2(m - m_new)
                acc = acc * alpha[:, None]
                l_sum = l_sum * alpha
                m = m_new
            p = tl.exp2(qk - m[:, None])
            return m, l_sum + tl.sum(p, 1), tl.dot(p.to(k_v.dtype), k_v, acc, input_precision=PREC)
        p = tl.exp2(qk - m_new[:, None])
        alpha = tl.exp2(m - m_new)
        return m_new, l_sum * alpha + tl.sum(p, 1), acc * alpha[:, None] + tl.dot(p.to(k_v.dtype), k_v,
                                                                                   input_precision=PREC)

    @triton.jit
    def _mla_split_kernel(Q, KV, KVD_V, KVD_PE, BT, LENS, ROWREQ, QPOS, O, LSE,
                          s_qn, s_qh, s_kvp, s_kvs, s_bt, s_oc, s_on, s_oh, s_lc, s_ln, s_lh, HL,
                          H, dcp_rank, dcp_size, qk_scale2, kv_scale,
                          PAGE: tl.constexpr, D_V: tl.constexpr, D_PE: tl.constexpr, D_VP: tl.constexpr,
                          D_PEP: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, IS_FP8: tl.constexpr,
                          USE_TMA: tl.constexpr, LAZY: tl.constexpr, WS: tl.constexpr, PREC: tl.constexpr):
        # Q: [N, H, R]  KV: [pages, PAGE, R] -> O: [C, N, HL, D_V], LSE: [C, N, HL]; grid (H/BLOCK_H, splits, N)
        # head h of split sp lands in block sp + h // HL (splits > 1: HL = H, one block per split)
        # D_VP, D_PEP: D_V and D_PE padded to powers of two >= 16 (tl.dot's shapes); padded columns load as 0
        hb, sp, n = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        b, start, end = visible_range(ROWREQ, QPOS, LENS, n, sp, tl.num_programs(1), BLOCK_N, dcp_rank, dcp_size)
        offs_h = hb * BLOCK_H + tl.arange(0, BLOCK_H)
        hmask = offs_h < H
        offs_v = tl.arange(0, D_VP)
        offs_pe = D_V + tl.arange(0, D_PEP)
        vmask = offs_v < D_V                 # column masks, used only where a part is padded (so unpadded
        pemask = offs_pe < D_V + D_PE        # rows compile to the same loads as before)
        q_row = Q + n.to(tl.int64) * s_qn + offs_h[:, None] * s_qh
        if D_VP != D_V:
            q_v = tl.load(q_row + offs_v[None, :], mask=hmask[:, None] & vmask[None, :], other=0.0)
        else:
            q_v = tl.load(q_row + offs_v[None, :], mask=hmask[:, None], other=0.0)
        if D_PEP != D_PE:
            q_pe = tl.load(q_row + offs_pe[None, :], mask=hmask[:, None] & pemask[None, :], other=0.0)
        else:
            q_pe = tl.load(q_row + offs_pe[None, :], mask=hmask[:, None], other=0.0)
        m = tl.full([BLOCK_H], float("-inf"), tl.float32)
        l_sum = tl.zeros([BLOCK_H], tl.float32)
        acc = tl.zeros([BLOCK_H, D_VP], tl.float32)
        tail = start
        if USE_TMA:     # whole tiles (each inside one page) by bulk copy; the partial last tile below
            tail = start + tl.maximum(end - start, 0) // BLOCK_N * BLOCK_N
            every = tl.arange(0, BLOCK_N) < BLOCK_N
            for s in tl.range(start, tail, BLOCK_N, warp_specialize=WS):
                r0 = tl.load(BT + b * s_bt + s // PAGE) * PAGE + s % PAGE
                m, l_sum, acc = _attend(q_v, q_pe, KVD_V.load([r0, 0]), KVD_PE.load([r0, D_V]), every,
                                        m, l_sum, acc, qk_scale2, LAZY, PREC)
        for s in range(tail, end, BLOCK_N):
            offs_j = s + tl.arange(0, BLOCK_N)
            jmask = offs_j < end
            page = tl.load(BT + b * s_bt + offs_j // PAGE, mask=jmask, other=0).to(tl.int64)
            row = KV + page * s_kvp + (offs_j % PAGE) * s_kvs
            if D_VP != D_V:
                k_v = tl.load(row[:, None] + offs_v[None, :], mask=jmask[:, None] & vmask[None, :], other=0.0)
            else:
                k_v = tl.load(row[:, None] + offs_v[None, :], mask=jmask[:, None], other=0.0)
            if D_PEP != D_PE:
                k_pe = tl.load(row[:, None] + offs_pe[None, :], mask=jmask[:, None] & pemask[None, :], other=0.0)
            else:
                k_pe = tl.load(row[:, None] + offs_pe[None, :], mask=jmask[:, None], other=0.0)
            if IS_FP8:
                k_v = k_v.to(tl.bfloat16)
                k_pe = k_pe.to(tl.bfloat16)
            m, l_sum, acc = _attend(q_v, q_pe, k_v, k_pe, jmask, m, l_sum, acc, qk_scale2, LAZY, PREC)
        seen = l_sum > 0
        o = tl.where(seen[:, None], acc * kv_scale / tl.where(seen, l_sum, 1.0)[:, None], 0.0)
        lse = tl.where(seen, (m + tl.log2(tl.where(seen, l_sum, 1.0))) * 0.6931471805599453, float("-inf"))
        blk = (sp + offs_h // HL).to(tl.int64)
        hl = (offs_h % HL).to(tl.int64)
        o_ptr = O + blk[:, None] * s_oc + n.to(tl.int64) * s_on + hl[:, None] * s_oh + offs_v[None, :]
        if D_VP != D_V:
            tl.store(o_ptr, o.to(O.dtype.element_ty), mask=hmask[:, None] & vmask[None, :])
        else:
            tl.store(o_ptr, o.to(O.dtype.element_ty), mask=hmask[:, None])
        tl.store(LSE + blk * s_lc + n.to(tl.int64) * s_ln + hl * s_lh, lse.to(LSE.dtype.element_ty), mask=hmask)
