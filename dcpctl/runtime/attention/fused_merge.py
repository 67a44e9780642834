"""Fused LSE merges on the GPU (Triton) with torch references; same semantics as `merge.py`.

    lse = logsumexp_s(lse_s)        o = sum_s exp(lse_s - lse) * o_s        (fp32 accumulation)

A partial whose lse is not finite (-inf for an empty shard, or NaN) is ignored: its o is never
loaded, so a NaN there cannot leak.  All outputs are in base e.

- `merge_partials`: [S, M, V] partials -> [M, V]; the split-KV reduction of `triton_mla`.
- `merge_a2a`: the receive side of the packed all-to-all, [c, N, H/c, V] -> [N, H/c, V].
- `rescale_partial`: the ag_rs correction, o_r * exp(lse_r - lse_global) before the reduce-scatter.
- `merge_into`: one partial into an fp32 accumulator in place (the MHA form's key blocks, attention/mha.py).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from dcpctl.runtime.attention.merge import merge_stacked, to_natural
from dcpctl.runtime.kernels import pdl

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU CI: the references only
    triton = None

LN2 = math.log(2.0)


def _use_triton(t: Tensor) -> bool:
    return triton is not None and t.device.type == "cuda"


def owner_major(o: Tensor, lse: Tensor, heads: int) -> tuple[Tensor, Tensor]:
    """Views of rows m = n*heads + h as a destination [c, N, Hl, V] / [c, N, Hl] with c = 1."""
    # o: [M, V]  lse: [M] -> [1, M/heads, heads, V], [1, M/heads, heads]
    m, v = o.shape
    return o.view(1, m // heads, heads, v), lse.view(1, m // heads, heads)


def store_owner_major(out: tuple[Tensor, Tensor], o: Tensor, lse: Tensor) -> None:
    """Copy rows m = n*H + h (H = c*Hl) into a destination [c, N, Hl, V] / [c, N, Hl]: head h goes to block h
    // Hl."""
    # o: [M, V]  lse: [M]
    do, dl = out
    c, n, hl, v = do.shape
    do.copy_(o.reshape(n, c, hl, v).transpose(0, 1))
    dl.copy_(lse.reshape(n, c, hl).transpose(0, 1))


def check_destination(out: tuple[Tensor, Tensor], n: int, heads: int, v: int) -> None:
    """A destination for n rows of `heads` heads: o [c, n, heads/c, v] (unit-stride last dim), lse [c, n,
    heads/c]."""
    do, dl = out
    c = do.shape[0] if do.dim() == 4 else 0
    if do.dim() != 4 or c == 0 or heads % c or tuple(do.shape) != (c, n, heads // c, v) \
            or tuple(dl.shape) != (c, n, heads // c) or do.stride(-1) != 1:
        raise ValueError(f"destination o {tuple(do.shape)} / lse {tuple(dl.shape)} does not hold {n} rows of "
                         f"{heads} heads x {v} as [c, rows, heads/c, v] with a unit-stride last dim")


def merge_partials_reference(o: Tensor, lse: Tensor, base: str = "e", out_dtype: torch.dtype | None = None,
                             out: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    # o: [S, M, V]  lse: [S, M] in `base` -> o [M, V] (out_dtype, default acc dtype), lse [M] base e
    lse = torch.where(torch.isnan(lse), torch.full_like(lse, -torch.inf), lse)
    p = merge_stacked(o, lse, base)
    if out is not None:
        store_owner_major(out, p.o, p.lse)
        return out
    return p.o.to(out_dtype or p.o.dtype), p.lse


def merge_partials(o: Tensor, lse: Tensor, base: str = "e", out_dtype: torch.dtype | None = None,
                   out: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    """Merge S partials per row: Triton on CUDA, else the torch reference.

    out: write into a destination (o [c, N, Hl, V], lse [c, N, Hl]; any strides, e.g. the a2a send
    buffer's views) instead of new [M, V] / [M] tensors: row m = n*c*Hl + h lands in block h // Hl."""
    # o: [S, M, V]  lse: [S, M] -> o [M, V], lse [M] fp32 base e (or the destination)
    if not _use_triton(o):
        return merge_partials_reference(o, lse, base, out_dtype, out)
    return merge_partials_triton(o, lse, base, out_dtype, out)


def merge_partials_triton(o: Tensor, lse: Tensor, base: str = "e", out_dtype: torch.dtype | None = None,
                          out: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    # o: [S, M, V]  lse: [S, M] (any strides; o's last dim unit-stride) -> o [M, V], lse [M] fp32 base e
    s, m, v = o.shape
    o = o if o.stride(-1) == 1 else o.contiguous()
    if out is None:
        out = owner_major(torch.empty(m, v, dtype=out_dtype or torch.float32, device=o.device),
                          torch.empty(m, dtype=torch.float32, device=o.device), 1)
        ret = out[0].view(m, v), out[1].view(m)
    else:
        heads = out[0].shape[0] * out[0].shape[2] if out[0].dim() == 4 else 0   # c * Hl of the destination
        check_destination(out, m // max(heads, 1), heads, v)
        ret = out
    do, dl = out
    s_pow2 = triton.next_power_of_2(s)
    # one [S, BLOCK_V] tile per program
    block_v = max(16, min(512, triton.next_power_of_2(v), 4096 // s_pow2))
    _merge_kernel[(m, triton.cdiv(v, block_v))](
        o, lse, do, dl, s, o.stride(0), o.stride(1), lse.stride(0), lse.stride(1), v,
        do.shape[0] * do.shape[2], do.shape[2], do.stride(0), do.stride(1), do.stride(2),
        dl.stride(0), dl.stride(1), dl.stride(2),
        LSE_SCALE=LN2 if base == "2" else 1.0, S_POW2=s_pow2, BLOCK_V=block_v, num_warps=4,
        **pdl.kw())
    return ret


def merge_a2a(o: Tensor, lse: Tensor, base: str = "e",
              out_dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor]:
    """Receive side of the packed all-to-all: merge the c ranks' partials of this rank's heads.

    o and lse may be strided views of the receive buffer (the LSE lanes read in place)."""
    # o: [c, N, Hc, V]  lse: [c, N, Hc] -> o [N, Hc, V], lse [N, Hc] base e
    c, n, hc, v = o.shape
    mo, ml = merge_partials(o.reshape(c, n * hc, v), lse.reshape(c, n * hc), base, out_dtype)
    return mo.view(n, hc, v), ml.view(n, hc)


def rescale_partial_reference(o: Tensor, lse_r: Tensor, lse_global: Tensor, base: str = "e") -> Tensor:
    # o: [N, H, V]  lse_r: [N, H] in `base`  lse_global: [N, H] base e -> fp32 [N, H, V]
    lr = to_natural(lse_r, base)
    w = torch.exp(lr - lse_global.to(lr.dtype))
    keep = (torch.isfinite(lr) & torch.isfinite(lse_global)).unsqueeze(-1)
    return torch.where(keep, o.to(lr.dtype) * w.unsqueeze(-1),
                       torch.zeros((), dtype=lr.dtype, device=o.device))


def rescale_partial(o: Tensor, lse_r: Tensor, lse_global: Tensor, base: str = "e") -> Tensor:
    """ag_rs correction: own partial scaled by exp(lse_r - lse_global); empty shards give exact zeros."""
    # o: [N, H, V]  lse_r, lse_global: [N, H] -> fp32 [N, H, V]
    if not _use_triton(o):
        return rescale_partial_reference(o, lse_r, lse_global, base)
    return rescale_partial_triton(o, lse_r, lse_global, base)


def rescale_partial_triton(o: Tensor, lse_r: Tensor, lse_global: Tensor, base: str = "e") -> Tensor:
    # o: [N, H, V]  lse_r, lse_global: [N, H] -> fp32 [N, H, V]
    n, h, v = o.shape
    o = o.contiguous()
    out = torch.empty(n, h, v, dtype=torch.float32, device=o.device)
    block_v = min(512, triton.next_power_of_2(v))
    _rescale_kernel[(n * h, triton.cdiv(v, block_v))](
        o, lse_r.contiguous(), lse_global.contiguous(), out, v,
        LSE_SCALE=LN2 if base == "2" else 1.0, BLOCK_V=block_v, num_warps=4)
    return out


def merge_into_reference(acc_o: Tensor, acc_lse: Tensor, o: Tensor, lse: Tensor) -> None:
    # acc_o: [t, H, V] acc dtype  acc_lse: [t, H]  o: [t, H, V]  lse: [t, H] base e (every row saw a key)
    lse = lse.to(acc_lse.dtype)
    new = torch.logaddexp(acc_lse, lse)
    acc_o.mul_(torch.exp(acc_lse - new).unsqueeze(-1)).addcmul_(o, torch.exp(lse - new).unsqueeze(-1))
    acc_lse.copy_(new)


def merge_into(acc_o: Tensor, acc_lse: Tensor, o: Tensor, lse: Tensor) -> None:
    """In place: lse' = logaddexp(lse_acc, lse), o' = exp(lse_acc - lse') o_acc + exp(lse - lse') o (an
    accumulator row at -inf, o 0, weighs 0).  One Triton pass on CUDA for an fp32 accumulator, else torch.

    acc_o [t, H, V] / acc_lse [t, H] and o [t, H, V] / lse [t, H] may be views with any row and head strides;
    their last dims are unit-stride on the Triton path; every row of the partial saw a key (a finite lse)."""
    if not (_use_triton(acc_o) and acc_o.dtype == torch.float32 and acc_o.stride(-1) == 1
            and o.stride(-1) == 1):
        return merge_into_reference(acc_o, acc_lse, o, lse)
    return merge_into_triton(acc_o, acc_lse, o, lse)


def merge_into_triton(acc_o: Tensor, acc_lse: Tensor, o: Tensor, lse: Tensor) -> None:
    # as merge_into: acc_o fp32 [t, H, V], o [t, H, V] (unit-stride last dims), lse's [t, H]
    t, h, v = acc_o.shape
    if t * h == 0:
        return None
    block_r = 16
    _merge_into_kernel[(triton.cdiv(t * h, block_r),)](
        acc_o, acc_lse, o, lse, t * h, h, v, acc_o.stride(0), acc_o.stride(1), acc_lse.stride(0),
        acc_lse.stride(1), o.stride(0), o.stride(1), lse.stride(0), lse.stride(1),
        BLOCK_R=block_r, BLOCK_V=triton.next_power_of_2(v), num_warps=4)
    return None


if triton is not None:
    @triton.jit
    def _merge_into_kernel(ACC, ACC_LSE, O, LSE, M, H, V,  # noqa: E741
                           s_at, s_ah, s_alt, s_alh, s_ot, s_oh, s_lt, s_lh, BLOCK_R: tl.constexpr,
                           BLOCK_V: tl.constexpr):
        # ACC: [t, H, V] fp32 += O's partial by LSE, in place; rows m = t*H + h, BLOCK_R of them per program
        m = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        rmask = m < M
        r, h = (m // H).to(tl.int64), (m % H).to(tl.int64)
        la = tl.load(ACC_LSE + r * s_alt + h * s_alh, mask=rmask, other=0.0)
        lb = tl.load(LSE + r * s_lt + h * s_lh, mask=rmask, other=0.0).to(tl.float32)
        mx = tl.maximum(la, lb)                                            # lb is finite: so is mx
        new = mx + tl.log(tl.exp(la - mx) + tl.exp(lb - mx))
        wa, wb = tl.exp(la - new), tl.exp(lb - new)
        offs_v = tl.arange(0, BLOCK_V)
        mask = rmask[:, None] & (offs_v < V)[None, :]
        pa = ACC + (r * s_at + h * s_ah)[:, None] + offs_v[None, :]
        a = tl.load(pa, mask=mask, other=0.0)
        b = tl.load(O + (r * s_ot + h * s_oh)[:, None] + offs_v[None, :], mask=mask, other=0.0).to(tl.float32)
        tl.store(pa, a * wa[:, None] + b * wb[:, None], mask=mask)
        tl.store(ACC_LSE + r * s_alt + h * s_alh, new, mask=rmask)

    @triton.jit
    def _merge_kernel(O, LSE, OUT, OUT_LSE, S, s_os, s_om, s_ls, s_lm, V,  # noqa: E741
                      H, HL, s_oc, s_on, s_oh, s_lc, s_ln, s_lh,
                      LSE_SCALE: tl.constexpr, S_POW2: tl.constexpr, BLOCK_V: tl.constexpr,
                      PDL: tl.constexpr):
        pdl.enter(PDL)
        # O: [S, M, V]  LSE: [S, M] -> row m = n*H + h of OUT: [c, N, HL, V], OUT_LSE: [c, N, HL] (block h //
        # HL) grid (M, V / BLOCK_V)
        row, vb = tl.program_id(0), tl.program_id(1)
        offs_s = tl.arange(0, S_POW2)
        lse = tl.load(LSE + offs_s * s_ls + row.to(tl.int64) * s_lm, mask=offs_s < S,
                      other=float("-inf")) * LSE_SCALE
        valid = (lse > float("-inf")) & (lse < float("inf"))            # NaN compares false
        mx = tl.max(tl.where(valid, lse, float("-inf")), 0)
        mx_safe = tl.where(mx > float("-inf"), mx, 0.0)
        total = tl.sum(tl.where(valid, tl.exp(lse - mx_safe), 0.0), 0)
        merged = tl.where(total > 0, mx_safe + tl.log(tl.where(total > 0, total, 1.0)), float("-inf"))
        w = tl.where(valid, tl.exp(tl.where(valid, lse, 0.0) - merged), 0.0)
        offs_v = vb * BLOCK_V + tl.arange(0, BLOCK_V)
        vmask = offs_v < V
        keep = (w > 0)[:, None] & vmask[None, :]                     # empty/NaN shards are never loaded
        x = tl.load(O + offs_s[:, None].to(tl.int64) * s_os + row.to(tl.int64) * s_om + offs_v[None, :],
                    mask=keep, other=0.0)
        acc = tl.sum(x.to(tl.float32) * w[:, None], 0)
        n, h = row // H, row % H
        blk, hl = h // HL, h % HL
        dst = blk.to(tl.int64) * s_oc + n.to(tl.int64) * s_on + hl.to(tl.int64) * s_oh
        tl.store(OUT + dst + offs_v, acc.to(OUT.dtype.element_ty), mask=vmask)
        tl.store(OUT_LSE + blk.to(tl.int64) * s_lc + n.to(tl.int64) * s_ln + hl.to(tl.int64) * s_lh,
                 merged.to(OUT_LSE.dtype.element_ty), mask=vb == 0)

    @triton.jit
    def _rescale_kernel(O, LSE_R, LSE_G, OUT, V,  # noqa: E741
                        LSE_SCALE: tl.constexpr, BLOCK_V: tl.constexpr):
        # O: [M, V]  LSE_R, LSE_G: [M] -> OUT: [M, V] fp32; grid (M, V / BLOCK_V)
        row, vb = tl.program_id(0), tl.program_id(1)
        lr = tl.load(LSE_R + row) * LSE_SCALE
        lg = tl.load(LSE_G + row)
        ok = (lr > float("-inf")) & (lr < float("inf")) & (lg > float("-inf")) & (lg < float("inf"))
        w = tl.where(ok, tl.exp(tl.where(ok, lr - lg, 0.0)), 0.0)
        offs_v = vb * BLOCK_V + tl.arange(0, BLOCK_V)
        vmask = offs_v < V
        # NaN rows of empty shards never load
        keep = vmask & (tl.zeros_like(offs_v) + ok.to(tl.int32) > 0)
        x = tl.load(O + row.to(tl.int64) * V + offs_v, mask=keep, other=0.0)
        tl.store(OUT + row.to(tl.int64) * V + offs_v, x.to(tl.float32) * w, mask=vmask)
