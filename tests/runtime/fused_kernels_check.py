"""The decode step's Triton kernels (rope_triton.py, norm_triton.add_rms_norm_fused, swiglu_triton.py,
embed_triton.py, head_bmm_triton.py), the MoE combine (moe_combine.py) and the MHA form's block merge
(fused_merge.merge_into_triton) and key assembly (attention/mha_keys.py) against the
torch forms they replace.  Run as a script under TRITON_INTERPRET=1 on the CPU (test_step_fusions.py),
imported by the GPU tests.

Exact (torch.equal) where the arithmetic is the same: the rope (V3's in x's dtype and V2's in fp32), the
residual sum, and every store position; the norms may differ by one rounding step (the kernel's mean sums as a
tree, as norm_triton says), SwiGLU's silu by one (exp).  The interpreter runs fp16 only: its
bf16 casts truncate instead of rounding to nearest, so bf16 is checked on the GPU (test_gpu_step_fusions.py).
"""
from __future__ import annotations

import sys

import torch

from dcpctl.runtime.attention.fused_merge import merge_into_reference, merge_into_triton
from dcpctl.runtime.attention.mha_keys import keys_torch, keys_triton
from dcpctl.runtime.models.config import RopeSpec
from dcpctl.runtime.kernels.norm_triton import add_rms_norm_fused
from dcpctl.runtime.models.ops import rms_norm_torch
from dcpctl.runtime.models.rope import Rotary
from dcpctl.runtime.kernels.rope_triton import kv_rows_into, rope_q_into
from dcpctl.runtime.kernels.embed_triton import embed_rows
from dcpctl.runtime.kernels.swiglu_triton import swiglu_fused
from dcpctl.runtime.kernels.moe_combine import _combine_triton, combine_reference, inverse


class _Cfg:  # the two fields Rotary reads, for a V3 (bf16 rotation) or V2 (fp32 rotation) model
    def __init__(self, rope: RopeSpec, fp32: bool):
        self.rope, self.rope_fp32 = rope, fp32


def rotary(interleaved: bool, fp32_math: bool, yarn: bool, device: str) -> Rotary:
    spec = (RopeSpec("yarn", 10000.0, 64, factor=40.0, original_max=4096, beta_fast=32, beta_slow=1,
                     mscale=1.0, mscale_all_dim=1.0, interleaved=interleaved) if yarn
            else RopeSpec("default", 10000.0, 64, interleaved=interleaved))
    return Rotary(_Cfg(spec, fp32_math), device)


def _close_norm(got: torch.Tensor, ref: torch.Tensor) -> bool:
    # within one step of got's dtype at the value (the mean's summation order)
    step = 2.0 ** -7 if ref.dtype == torch.bfloat16 else 2.0 ** -10
    return bool(((got.float() - ref.float()).abs() <= ref.float().abs() * step + 1e-30).all())


def check_rope_q(device: str, dtype: torch.dtype, interleaved: bool, fp32_math: bool, yarn: bool, T: int = 5,
                 H: int = 20) -> None:
    g = torch.Generator().manual_seed(T * H + interleaved)
    r = rotary(interleaved, fp32_math, yarn, device)
    # q_b's output: [nope | rope]
    q = (torch.randn(T, H, 192, generator=g) * 2).to(device=device, dtype=dtype)
    cos, sin = r.cos_sin(torch.randint(0, 9000, (T,), generator=g).to(device))
    out = torch.full((T, H, 576), float("nan"), device=device, dtype=dtype)
    rope_q_into(q[:, :, 128:], cos, sin, out[:, :, 512:], interleaved, fp32_math)
    ref = r.apply(q[:, :, 128:], cos, sin)
    assert torch.isnan(out[:, :, :512]).all(), "wrote outside the rope slice"
    got = out[:, :, 512:]
    assert torch.equal(got, ref), (got.float() - ref.float()).abs().max()
    inplace = q.clone()                   # the MHA form ropes q's own rope slice in place
                                          # (models/attention.py)
    rope_q_into(inplace[:, :, 128:], cos, sin, inplace[:, :, 128:], interleaved, fp32_math)
    assert torch.equal(inplace[:, :, :128], q[:, :, :128]) and torch.equal(inplace[:, :, 128:], ref)


def check_kv_rows(device: str, dtype: torch.dtype, interleaved: bool, fp32_math: bool, yarn: bool) -> None:
    g = torch.Generator().manual_seed(7 + interleaved)
    r = rotary(interleaved, fp32_math, yarn, device)
    T, L = 6, 512
    both = (torch.randn(T, 1536 + L + 64, generator=g) * 3).to(device=device, dtype=dtype)   # q_a | kv_a
    kv = both[:, 1536:]
    w = (torch.rand(L, generator=g) + 0.5).to(device=device, dtype=dtype)
    cos, sin = r.cos_sin(torch.randint(0, 9000, (T,), generator=g).to(device))
    pool = torch.zeros(40, L + 64, device=device, dtype=dtype)
    rows = torch.tensor([0, 2, 3, 5], device=device)
    slots = torch.tensor([17, 3, 39, 8], device=device)
    kv_rows_into(kv, w, 1e-6, cos, sin, pool, rows, slots, interleaved, fp32_math)
    ref = torch.zeros_like(pool)
    new = torch.cat([rms_norm_torch(kv[:, :L], w, 1e-6), r.apply(kv[:, L:], cos, sin)], dim=-1)
    ref.index_copy_(0, slots, new.index_select(0, rows))
    untouched = torch.ones(40, dtype=torch.bool, device=device)
    untouched[slots] = False
    assert not pool[untouched].any(), "wrote a slot outside `slots`"
    assert _close_norm(pool[slots, :L], ref[slots, :L])
    assert torch.equal(pool[slots, L:], ref[slots, L:]), (pool[slots, L:].float()
                                                          - ref[slots, L:].float()).abs().max()


def check_add_norm(device: str, dtype: torch.dtype, T: int = 3, D: int = 7168) -> None:
    g = torch.Generator().manual_seed(T + D)
    x = (torch.randn(T, D, generator=g) * 4).to(device=device, dtype=dtype)
    # a strided residual
    res = (torch.randn(T, D + 8, generator=g) * 4).to(device=device, dtype=dtype)[:, :D]
    w = (torch.rand(D, generator=g) + 0.5).to(device=device, dtype=dtype)
    h, y = add_rms_norm_fused(x, res, w, 1e-6)
    want_h = res + x
    assert torch.equal(h, want_h)
    assert _close_norm(y, rms_norm_torch(want_h, w, 1e-6))
    e_h, e_y = add_rms_norm_fused(x[:0], res[:0], w, 1e-6)
    assert e_h.shape == (0, D) and e_y.shape == (0, D)


def check_swiglu(device: str, dtype: torch.dtype, T: int = 3, inter: int = 2048) -> None:
    g = torch.Generator().manual_seed(T + inter)
    h = (torch.randn(T, 2 * inter, generator=g) * 3).to(device=device, dtype=dtype)
    got = swiglu_fused(h, inter)
    gate, up = h.split(inter, -1)
    want = torch.nn.functional.silu(gate) * up
    # libdevice expf and an IEEE division as torch's CUDA silu; exp may still round apart (and torch's CPU
    # silu vectorizes exp its own way): within a step of the dtype, nearly all equal
    assert _close_norm(got, want)
    assert (got == want).float().mean() > 0.99


def check_embed(device: str, dtype: torch.dtype, start: int = 100, n: int = 164, D: int = 3000) -> None:
    # this rank's rows [start, start + n) of the vocab; ids outside them give exact zeros
    g = torch.Generator().manual_seed(n)
    embed = torch.randn(n, D, generator=g).to(device=device, dtype=dtype)
    ids = torch.tensor([100, 0, 263, 264, 99, 150, 5000, 101], device=device)
    local = ids - start
    mine = ((local >= 0) & (local < n)).unsqueeze(1)
    want = torch.where(mine, embed[local.clamp(0, n - 1)], 0.0)
    assert torch.equal(embed_rows(ids, embed, start), want)
    assert embed_rows(ids[:0], embed, start).shape == (0, D)


def check_head_bmm(device: str, dtype: torch.dtype, T: int, H: int = 8, nope: int = 128, lat: int = 512,
                   v: int = 128) -> None:
    # the two decode products over the model's token-major views: q_nope (a split of q) @ w_kc into the latent
    # slice of the query buffer, o @ w_vc into [T, H, v]; against an fp32 reference (rows of fp32 sums,
    # rounded once)
    from dcpctl.runtime.kernels.head_bmm_triton import head_bmm
    g = torch.Generator().manual_seed(T)
    q = torch.randn(T, H, nope + 64, generator=g).to(device=device, dtype=dtype)
    w_kc = (torch.randn(H, nope, lat, generator=g) / nope ** 0.5).to(device=device, dtype=dtype)
    w_vc = (torch.randn(H, lat, v, generator=g) / lat ** 0.5).to(device=device, dtype=dtype)
    out = torch.full((T, H, lat + 64), 7.0, device=device, dtype=dtype)
    head_bmm(q[:, :, :nope].transpose(0, 1), w_kc, out[:, :, :lat].transpose(0, 1))
    want = torch.einsum("thn,hnl->thl", q[:, :, :nope].float(), w_kc.float())
    step = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10
    assert ((out[:, :, :lat].float() - want).abs() <= want.abs() * step + 1e-3).all()
    assert torch.equal(out[:, :, lat:], torch.full_like(out[:, :, lat:], 7.0))     # the rope slice untouched
    o = torch.randn(T, H, lat, generator=g).to(device=device, dtype=dtype)
    vv = torch.empty(T, H, v, device=device, dtype=dtype)
    head_bmm(o.transpose(0, 1), w_vc, vv.transpose(0, 1))
    want = torch.einsum("thl,hlv->thv", o.float(), w_vc.float())
    assert ((vv.float() - want).abs() <= want.abs() * step + 1e-3).all()


def check_merge_into(device: str, dtype: torch.dtype, T: int = 37, H: int = 5, V: int = 24) -> None:
    """Strided views as the MHA form passes them: every other accumulator row (a query phase), a partial laid
    out heads-first (cuDNN's output transposed); rows at -inf in the accumulator take the partial whole."""
    g = torch.Generator().manual_seed(T * H + V)
    acc = torch.randn(2 * T, H, V, generator=g).to(device)
    acc_lse = (torch.randn(2 * T, H, generator=g) * 4).to(device)
    acc_lse[::7] = -torch.inf
    acc[::7] = 0
    o = torch.randn(H, T, V, generator=g).to(device=device, dtype=dtype).transpose(0, 1)
    lse = (torch.randn(H, T, generator=g) * 4).to(device).transpose(0, 1)
    want_o, want_lse = acc[::2].clone(), acc_lse[::2].clone()
    merge_into_reference(want_o, want_lse, o, lse)
    got_o, got_lse = acc.clone(), acc_lse.clone()
    merge_into_triton(got_o[::2], got_lse[::2], o, lse)
    assert torch.allclose(got_o[::2], want_o, rtol=1e-5, atol=1e-5)
    assert torch.allclose(got_lse[::2], want_lse, rtol=1e-6, atol=1e-5)
    # rows left alone
    assert torch.equal(got_o[1::2], acc[1::2]) and torch.equal(got_lse[1::2], acc_lse[1::2])


def check_mha_keys(device: str, dtype: torch.dtype, s: int = 37, H: int = 20, nope: int = 24, v: int = 16,
                   rope: int = 8) -> None:
    """The MHA form's key assembly: kv as kv_b_proj's GEMM output, k_pe a strided view of the latent rows; a
    copy, so the kernel equals the two torch copies bit for bit (rows and heads past a program's tile
    included)."""
    g = torch.Generator().manual_seed(s * H)
    kv = torch.randn(s, H, nope + v, generator=g).to(device=device, dtype=dtype)
    rows = torch.randn(s, 40 + rope, generator=g).to(device=device, dtype=dtype)
    got = keys_triton(kv, rows[:, 40:], nope)
    want = keys_torch(kv, rows[:, 40:], nope)
    assert got.shape == (s, H, nope + rope) and torch.equal(got, want)
    assert torch.equal(want[:, -1, :nope], kv[:, -1, :nope]) and torch.equal(want[:, -1, nope:], rows[:, 40:])


def check_moe_combine(device: str, dtype: torch.dtype, T: int = 37, k: int = 8, D: int = 1100,
                      local: int = 200, ends_dtype: torch.dtype = torch.int32) -> None:
    # y's rows sorted by expert, the last T * k - local of them other ranks' (unset: NaN here, must count as
    # 0); the kernel against the torch form: the same fp32 products, summed in slot order, rounded once
    g = torch.Generator().manual_seed(T + k)
    order = torch.randperm(T * k, generator=g).to(device)
    ends = torch.tensor([local // 2, local], device=device, dtype=ends_dtype)   # grouped: int32; loop: int64
    y = torch.randn(T * k, D, generator=g).to(device=device, dtype=dtype)
    y[local:] = float("nan")
    w = torch.rand(T, k, generator=g).to(device)
    inv = inverse(order)
    got, want = _combine_triton(y, inv, ends, w), combine_reference(y, inv, ends, w)
    assert torch.isfinite(got).all()
    # one rounding step of the dtype at the value, plus fp32's summation-order error on the terms' magnitude
    step = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10
    mag = combine_reference(y.abs().float(), inv, ends, w).float()
    assert ((got.float() - want.float()).abs() <= want.float().abs() * step + mag * 2.0 ** -20).all()
    assert (got == want).float().mean() > 0.99


def check_all(device: str, dtypes: tuple[torch.dtype, ...]) -> None:
    for dtype in dtypes:
        check_moe_combine(device, dtype)
        check_moe_combine(device, dtype, T=5, k=3, D=64, local=15, ends_dtype=torch.int64)
        check_merge_into(device, dtype)
        check_mha_keys(device, dtype)
        check_mha_keys(device, dtype, s=1, H=1, nope=128, v=128, rope=64)
        for interleaved in (True, False):
            for fp32_math in (False, True):
                check_rope_q(device, dtype, interleaved, fp32_math, yarn=interleaved)
                check_kv_rows(device, dtype, interleaved, fp32_math, yarn=not interleaved)
        check_rope_q(device, dtype, True, False, True, T=1, H=128)
        check_add_norm(device, dtype)
        check_add_norm(device, dtype, T=1, D=512)
        check_swiglu(device, dtype)
        check_swiglu(device, dtype, T=1, inter=1000)
        check_embed(device, dtype)
        for t in (1, 5, 64):
            check_head_bmm(device, dtype, t)


if __name__ == "__main__":
    check_all("cpu", (torch.float16,))   # the interpreter's bf16 casts truncate (84% of rotations off by an
                                         # ulp)
    print("ok")
    sys.exit(0)
