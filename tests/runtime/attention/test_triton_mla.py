"""Local MLA decode (reference and Triton) and the fused merges.

CPU tier: the reference over a striped, paged shard, merged across DCP ranks, equals unsplit causal
attention.  Triton tier: runs on CUDA, or on CPU under TRITON_INTERPRET=1 when triton is installed;
skipped otherwise (CI has no triton).
"""
import math
import os

import pytest
import torch

from dcpctl.runtime.attention import fused_merge, triton_mla
from dcpctl.runtime.attention.fused_merge import (merge_a2a, merge_partials_reference,
                                                  rescale_partial_reference)
from dcpctl.runtime.attention.local import attention_mask, local_attention
from dcpctl.runtime.attention.merge import Partial, merge, merge_stacked
from dcpctl.runtime.attention.triton_mla import mla_decode_reference, mla_decode_triton

CUDA = torch.cuda.is_available()
TRITON = triton_mla.triton is not None and (CUDA or os.environ.get("TRITON_INTERPRET") == "1")
needs_triton = pytest.mark.skipif(not TRITON, reason="needs triton on CUDA (or TRITON_INTERPRET=1)")
DEV = "cuda" if CUDA else "cpu"
LOW = torch.bfloat16 if CUDA else torch.float16   # the Triton interpreter mis-handles bf16 dots


def make_case(seed, lens, c, page, heads, v_dim, rope, tokens_per_req=1, dtype=torch.float64, device="cpu",
              garbage="randn"):
    # -> dict: full per-request KV [L, R] (global order), per-rank paged pools, q [N, H, R], row_req, q_pos;
    # garbage="nan" fills the pool slots no request owns with NaN (a kernel must never weigh them, not even by
    # 0)
    g = torch.Generator().manual_seed(seed)
    r = v_dim + rope
    full = [torch.randn(L, r, generator=g, dtype=torch.float64) for L in lens]
    row_req = torch.arange(len(lens)).repeat_interleave(tokens_per_req)
    q_pos = torch.cat([torch.arange(L - tokens_per_req, L) for L in lens]).clamp_min(0)
    q = torch.randn(len(row_req), heads, r, generator=g, dtype=torch.float64)
    ranks = []
    for rank in range(c):
        shard = [kv[rank::c] for kv in full]
        lens_r = torch.tensor([len(s) for s in shard], dtype=torch.int32)
        max_pages = max(1, max(math.ceil(len(s) / page) for s in shard))
        n_pages = len(lens) * max_pages + 3
        perm = torch.randperm(n_pages, generator=g)[: len(lens) * max_pages].view(len(lens), max_pages)
        pool = torch.randn(n_pages, page, r, generator=g, dtype=torch.float64)  # garbage in unused slots
        if garbage == "nan":
            pool.fill_(float("nan"))
        for b, s in enumerate(shard):
            for j in range(len(s)):
                pool[perm[b, j // page], j % page] = s[j]
        ranks.append(dict(pool=pool.to(dtype).to(device), bt=perm.int().to(device), lens=lens_r.to(device)))
    return dict(full=full, q=q, row_req=row_req, q_pos=q_pos, ranks=ranks, c=c, v_dim=v_dim)


def full_attention(case, scale):
    # unsplit causal attention over the whole (unstriped) context, float64
    kv = torch.cat(case["full"])
    pos = torch.cat([torch.arange(len(k)) for k in case["full"]])
    seq = torch.cat([torch.full((len(k),), b) for b, k in enumerate(case["full"])])
    mask = attention_mask(case["q_pos"], case["row_req"], pos, seq)
    return local_attention(case["q"], kv, mask, scale, case["v_dim"])


def run_ranks(fn, case, scale, q=None, **kw):
    q = case["q"] if q is None else q
    dev = case["ranks"][0]["pool"].device
    out = []
    for rank, rk in enumerate(case["ranks"]):
        res = fn(q.to(dev), rk["pool"], rk["bt"], rk["lens"], case["row_req"].int().to(dev),
                 case["q_pos"].int().to(dev), scale=scale, v_dim=case["v_dim"], dcp_rank=rank,
                 dcp_size=case["c"], **kw)
        assert res.base == "e"
        out.append(Partial(res.o.double().cpu(), res.lse.double().cpu(), res.base))
    return out


@pytest.mark.parametrize("c", [1, 2, 3, 4])
@pytest.mark.parametrize("tokens", [1, 3])
def test_reference_striped_merge_equals_unsplit(c, tokens):
    case = make_case(c * 10 + tokens, [1, 5, 17, 40], c, page=4, heads=3, v_dim=8, rope=4,
                     tokens_per_req=tokens)
    want_o, want_lse = full_attention(case, 0.3)
    m = merge(run_ranks(mla_decode_reference, case, 0.3))
    torch.testing.assert_close(m.o, want_o, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(m.lse, want_lse, atol=1e-12, rtol=1e-12)


def test_reference_empty_rank_gives_neg_inf_and_zeros():
    case = make_case(0, [1, 2], 4, page=2, heads=2, v_dim=8, rope=4)
    parts = run_ranks(mla_decode_reference, case, 0.5)
    assert torch.isneginf(parts[3].lse).all() and torch.equal(parts[3].o, torch.zeros_like(parts[3].o))


def test_reference_fp8_pool_equals_dequantized():
    case = make_case(3, [7, 33], 2, page=8, heads=2, v_dim=16, rope=16, tokens_per_req=2, dtype=torch.float32)
    rk = case["ranks"][1]
    pool8 = (rk["pool"] / 0.1).to(torch.float8_e4m3fn)
    args = (case["q"], rk["bt"], rk["lens"], case["row_req"], case["q_pos"])
    kw = dict(scale=0.3, v_dim=16, dcp_rank=1, dcp_size=2)
    got = mla_decode_reference(args[0], pool8, *args[1:], kv_scale=0.1, **kw)
    want = mla_decode_reference(args[0], pool8.double() * 0.1, *args[1:], **kw)
    torch.testing.assert_close(got.o, want.o, atol=1e-12, rtol=1e-12)


def test_merge_references_ignore_nan_shards():
    o, lse = torch.randn(3, 6, 5), torch.randn(3, 6)
    o[1], lse[1, :3], lse[1, 3:] = float("nan"), -torch.inf, float("nan")
    got_o, got_lse = merge_partials_reference(o, lse)
    want = merge_stacked(o[[0, 2]], lse[[0, 2]], "e")
    torch.testing.assert_close(got_o, want.o)
    torch.testing.assert_close(got_lse, want.lse)
    a_o, a_lse = merge_a2a(o.view(3, 2, 3, 5), lse.view(3, 2, 3))
    torch.testing.assert_close(a_o, want.o.view(2, 3, 5))
    r = rescale_partial_reference(o[1], lse[1], want.lse)
    assert torch.equal(r, torch.zeros_like(r))
    r0 = rescale_partial_reference(o[0], lse[0], want.lse)
    torch.testing.assert_close(r0, o[0] * torch.exp(lse[0] - want.lse).unsqueeze(-1))


def rel_err(got, want):
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def check_triton_case(case, scale, tol, kv_scale=None, **kw):
    q = case["q"].to(case["ranks"][0]["pool"].dtype if kv_scale is None else torch.bfloat16)
    ref = [mla_decode_reference(q.double(),
                                rk["pool"].cpu().double() if kv_scale is None else rk["pool"].cpu(),
                                rk["bt"].cpu(), rk["lens"].cpu(), case["row_req"], case["q_pos"], scale=scale,
                                v_dim=case["v_dim"], dcp_rank=i, dcp_size=case["c"], kv_scale=kv_scale)
           for i, rk in enumerate(case["ranks"])]
    got = run_ranks(mla_decode_triton, case, scale, q=q, kv_scale=kv_scale, **kw)
    for g, w in zip(got, ref):
        w_o, w_lse = w.o.double(), w.lse.double()
        assert torch.equal(torch.isneginf(g.lse), torch.isneginf(w_lse))
        assert torch.isfinite(g.o).all()
        assert rel_err(g.o, w_o) < tol, rel_err(g.o, w_o)
        fin = torch.isfinite(w_lse)
        torch.testing.assert_close(g.lse[fin], w_lse[fin], atol=tol, rtol=0)
    return got


@needs_triton
@pytest.mark.parametrize("c,tokens,splits,tma", [(1, 1, None, False), (2, 3, 4, True), (3, 2, 1, False),
                                                  (4, 1, 3, True)])
def test_triton_small_matches_reference(c, tokens, splits, tma):
    case = make_case(7 * c + tokens, [1, 9, 70, 130], c, page=16, heads=20, v_dim=32, rope=16,
                     tokens_per_req=tokens, dtype=LOW, device=DEV)
    cfg = triton_mla.KernelConfig(block_h=16, block_n=16, num_warps=4, num_stages=1, tma=tma)
    check_triton_case(case, 0.2, 2e-2, num_splits=splits, config=cfg)


@needs_triton
@pytest.mark.parametrize("v_dim,rope", [(32, 8), (24, 40), (512, 64)])
def test_triton_rows_that_are_not_powers_of_two(v_dim, rope):
    # the tiny models' rows (32 + 8) and odd widths: the kernel pads each part to a power of two >= 16
    # with zero columns (and no bulk copies); v 512 + rope 64 keeps the unpadded path
    case = make_case(v_dim + rope, [1, 9, 40], 2, page=16, heads=20, v_dim=v_dim, rope=rope, tokens_per_req=2,
                     dtype=LOW, device=DEV)
    cfg = triton_mla.KernelConfig(block_h=16, block_n=16, num_warps=4, num_stages=1, tma=True)
    check_triton_case(case, 0.2, 2e-2, num_splits=2, config=cfg)


@needs_triton
@pytest.mark.parametrize("v_dim,rope,cfg", [(32, 8, (16, 16, 4, 1)), (128, 64, (16, 32, 4, 2))])
def test_triton_fp32_pool_is_fp32_exact(v_dim, rope, cfg):
    # an fp32 pool must not drop to tf32 in the dots (10-bit mantissa: ~1e-3 relative error); a GPU guard:
    # the interpreter's dots are exact fp32 either way
    case = make_case(11, [1, 9, 70], 2, page=16, heads=16, v_dim=v_dim, rope=rope, tokens_per_req=2,
                     dtype=torch.float32, device=DEV)
    check_triton_case(case, 0.2, 1e-5, num_splits=2, config=triton_mla.KernelConfig(*cfg))


@needs_triton
@pytest.mark.parametrize("scale", [0.2, 3.0])
@pytest.mark.parametrize("tma", [False, True])
def test_triton_lazy_rescale_matches_reference(scale, tma):
    # scale 3.0 spreads the scores over many powers of two, so the running max keeps growing past the
    # lazy threshold tile after tile; scale 0.2 rarely crosses it after the first tile
    case = make_case(13, [1, 9, 70, 130], 2, page=16, heads=20, v_dim=32, rope=16, tokens_per_req=2,
                     dtype=LOW, device=DEV)
    cfg = triton_mla.KernelConfig(block_h=16, block_n=16, num_warps=4, num_stages=1, tma=tma, lazy=True)
    check_triton_case(case, scale, 2e-2, num_splits=2, config=cfg)


@needs_triton
@pytest.mark.parametrize("base", ["e", "2"])
def test_triton_merge_kernels_ignore_nan(base):
    o = torch.randn(3, 64, 40, device=DEV)
    lse = torch.randn(3, 64, device=DEV) * 3
    o[1], lse[1, :30], lse[1, 30:] = float("nan"), -torch.inf, float("nan")
    lse[:, 5] = -torch.inf
    got_o, got_lse = fused_merge.merge_partials_triton(o, lse, base=base)
    want_o, want_lse = merge_partials_reference(o.cpu(), lse.cpu(), base=base)
    assert torch.equal(got_o[5].cpu(), torch.zeros(40)) and torch.isneginf(got_lse[5])
    torch.testing.assert_close(got_o.cpu(), want_o, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_lse.cpu(), want_lse, atol=1e-5, rtol=1e-5)
    for r in range(2):
        args = (o[r].view(8, 8, 40), lse[r].view(8, 8), want_lse.view(8, 8).to(DEV), base)
        got = fused_merge.rescale_partial_triton(*args)
        want = rescale_partial_reference(*[a.cpu() if torch.is_tensor(a) else a for a in args])
        torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)


@needs_triton
@pytest.mark.skipif(not CUDA, reason="DeepSeek-V3 shapes need a GPU")
@pytest.mark.parametrize("heads", [16, 64, 128, 48])
@pytest.mark.parametrize("fp8", [False, True])
def test_triton_deepseek_shapes_vs_fp64(heads, fp8):
    c = 2
    case = make_case(heads, [3, 300, 1500, 4100], c, page=64, heads=heads, v_dim=512, rope=64,
                     tokens_per_req=2, dtype=torch.bfloat16, device=DEV)
    scale, kv_scale = 1 / math.sqrt(192), None
    if fp8:
        kv_scale = 0.05
        for rk in case["ranks"]:
            rk["pool"] = (rk["pool"].float() / kv_scale).to(torch.float8_e4m3fn)
    check_triton_case(case, scale, 5e-2 if fp8 else 2e-2, kv_scale=kv_scale)


@needs_triton
@pytest.mark.skipif(not CUDA, reason="DeepSeek-V3 shapes need a GPU")
@pytest.mark.parametrize("cfg", [(64, 64, 8, 2, 1, True), (64, 32, 8, 3, 1, True), (16, 64, 8, 3, 1, True),
                                 (16, 128, 8, 3, 1, False), (64, 64, 8, 2, 1, True, True),
                                 (16, 128, 8, 2, 1, False, True), (64, 64, 8, 2, 1, True, True, True)])
def test_triton_configs_vs_fp64(cfg):
    case = make_case(5, [2, 700, 3000], 1, page=64, heads=64, v_dim=512, rope=64, tokens_per_req=3,
                     dtype=torch.bfloat16, device=DEV)
    check_triton_case(case, 1 / math.sqrt(192), 2e-2, config=triton_mla.KernelConfig(*cfg))


@pytest.mark.skipif(CUDA, reason="checks the CPU refusal")
def test_bench_kernel_needs_cuda():
    from click.testing import CliRunner
    from dcpctl.cli.main import cli
    r = CliRunner().invoke(cli, ["bench", "kernel", "--quick"])
    assert r.exit_code == 2 and "needs a CUDA GPU" in r.output


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("v_dim", [8, 7])
@pytest.mark.parametrize("t", [4, 0])
def test_pack_by_owner_layout_and_lanes_in_place(dtype, v_dim, t):
    # block j of the send buffer = rank j's heads; the LSE's bytes follow o in k lanes, read back in place
    # (t = 0: an idle replica still packs and exchanges empty tensors)
    from dcpctl.runtime.attention.comm import lane_count, lse_wire_dtype, pack_by_owner, unpack
    c, hl = 3, 2
    o = torch.randn(t, c * hl, v_dim).to(dtype)
    lse = torch.randn(t, c * hl, dtype=torch.float64)
    if t:
        lse[0, 1] = -torch.inf
    buf = pack_by_owner(o, lse, dtype, c)
    k = lane_count(dtype)
    assert buf.shape == (c, t, hl, v_dim + k) and buf.dtype == dtype
    wire = lse_wire_dtype(dtype)
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize]
    for j in range(c):
        torch.testing.assert_close(buf[j, :, :, :v_dim], o[:, j * hl:(j + 1) * hl], atol=0, rtol=0)
        # the bit pattern on the wire
        lanes = lse[:, j * hl:(j + 1) * hl].to(wire).unsqueeze(-1).view(dtype)
        assert torch.equal(buf[j, :, :, v_dim:].contiguous().view(bits), lanes.view(bits))
    o_back, lse_back = unpack(buf, v_dim, dtype)
    assert lse_back.dtype == wire
    torch.testing.assert_close(lse_back, lse.to(wire).reshape(t, c, hl).transpose(0, 1), atol=0, rtol=0)
    if v_dim % 2 == 0 and t:
        # a view, not a copy
        assert lse_back.untyped_storage().data_ptr() == buf.untyped_storage().data_ptr()


@pytest.mark.parametrize("c", [1, 2, 4])
def test_reference_writes_owner_major_destination(c):
    from dcpctl.runtime.attention.comm import send_buffer
    case = make_case(11 + c, [3, 20, 41], 2, page=4, heads=4 * c, v_dim=8, rope=4, tokens_per_req=2)
    rk = case["ranks"][1]
    args = (case["q"], rk["pool"], rk["bt"], rk["lens"], case["row_req"], case["q_pos"])
    kw = dict(scale=0.3, v_dim=8, dcp_rank=1, dcp_size=2)
    want = mla_decode_reference(*args, **kw)
    n = case["q"].shape[0]
    send = send_buffer(n, 4 * c, 8, c, torch.float64, torch.device("cpu"))
    got = mla_decode_reference(*args, **kw, out=(send.o, send.lse))
    assert got.o.data_ptr() == send.o.data_ptr()
    torch.testing.assert_close(send.o, want.o.view(n, c, 4, 8).transpose(0, 1), atol=0, rtol=0)
    torch.testing.assert_close(send.lse, want.lse.view(n, c, 4).transpose(0, 1), atol=0, rtol=0)


@needs_triton
@pytest.mark.parametrize("c,splits", [(2, 1), (2, 3), (4, 1), (4, 2)])
def test_triton_writes_send_buffer_in_place(c, splits):
    # the kernel (one split) or the split merge writes o and the LSE lanes straight into the a2a send buffer
    from dcpctl.runtime.attention.comm import send_buffer, unpack
    case = make_case(5 * c + splits, [1, 9, 70], 2, page=16, heads=8 * c, v_dim=32, rope=16, tokens_per_req=2,
                     dtype=LOW, device=DEV)
    rk = case["ranks"][0]
    q = case["q"].to(LOW).to(DEV)
    args = (q, rk["pool"], rk["bt"], rk["lens"], case["row_req"].int().to(DEV), case["q_pos"].int().to(DEV))
    cfg = triton_mla.KernelConfig(block_h=16, block_n=16, num_warps=4, num_stages=1)
    kw = dict(scale=0.2, v_dim=32, dcp_rank=0, dcp_size=2, num_splits=splits, config=cfg)
    want = mla_decode_triton(*args, **kw, out_dtype=LOW)
    n = q.shape[0]
    send = send_buffer(n, 8 * c, 32, c, LOW, torch.device(DEV))
    send.buf.fill_(7.0)
    mla_decode_triton(*args, **kw, out=(send.o, send.lse))
    o_back, lse_back = unpack(send.buf, 32, LOW)
    torch.testing.assert_close(o_back.cpu(), want.o.view(n, c, 8, 32).transpose(0, 1).cpu(), atol=0, rtol=0)
    torch.testing.assert_close(lse_back.cpu(), want.lse.view(n, c, 8).transpose(0, 1).cpu(), atol=0, rtol=0)


@needs_triton
def test_triton_merge_reads_strided_lse_lanes():
    # merge_a2a on the receive buffer's views: o [c, N, Hc, V] and LSE lanes read in place
    from dcpctl.runtime.attention.comm import pack_by_owner, unpack
    c, n, hc, v = 3, 5, 4, 32
    o = torch.randn(n, c * hc, v, device=DEV).to(LOW)
    lse = torch.randn(n, c * hc, device=DEV) * 3
    lse[1, :hc] = -torch.inf
    buf = pack_by_owner(o, lse, LOW, c)
    o_parts, lse_parts = unpack(buf, v, LOW)
    assert lse_parts.stride(-1) != 1                       # really the strided lane view
    got_o, got_lse = merge_a2a(o_parts, lse_parts, "e", LOW)
    want_o, want_lse = merge_partials_reference(o_parts.cpu().float().reshape(c, n * hc, v),
                                                lse_parts.cpu().reshape(c, n * hc))
    assert got_o.dtype == LOW
    torch.testing.assert_close(got_o.cpu().float(), want_o.view(n, hc, v), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(got_lse.cpu(), want_lse.view(n, hc), atol=1e-5, rtol=1e-5)


def test_tuned_configs_from_a_sweep_output(tmp_path):
    from dcpctl.runtime import settings
    doc = {"configs": {"128": [128, 64, 16, 2, 1, True]}, "cells": []}
    (tmp_path / "k.json").write_text(__import__("json").dumps(doc))
    with settings.using(mla_configs=str(tmp_path / "k.json")):
        assert triton_mla.default_config(128) == triton_mla.KernelConfig(128, 64, 16, 2, 1, True)
    # not in the file: built-in
    assert triton_mla.default_config(16) == triton_mla.KernelConfig(16, 128, 8, 2)


@pytest.mark.parametrize("text",
                         ["not json", '{"configs": {"128": [64]}}', '{"configs": {"128": 5}}', "[1, 2]"])
def test_tuned_configs_bad_file_is_one_line_user_error(tmp_path, text):
    from dcpctl.plan.errors import UserError
    f = tmp_path / f"bad{len(text)}.json"
    f.write_text(text)
    with pytest.raises(UserError, match=r"--mla-configs .*not a kernel config file"):
        triton_mla.tuned_configs(str(f))
    with pytest.raises(UserError, match="not a kernel config file"):
        triton_mla.tuned_configs(str(tmp_path / "missing.json"))


def test_destination_shape_is_checked():
    from dcpctl.runtime.attention.fused_merge import check_destination
    check_destination((torch.empty(2, 3, 4, 8), torch.empty(2, 3, 4)), 3, 8, 8)
    for o, lse in [(torch.empty(2, 3, 4, 8), torch.empty(2, 3, 5)),
                   (torch.empty(3, 3, 4, 8), torch.empty(3, 3, 4)),
                   (torch.empty(2, 3, 4, 16)[..., ::2], torch.empty(2, 3, 4)),
                   (torch.empty(3, 32), torch.empty(3))]:
        with pytest.raises(ValueError, match="does not hold 3 rows of 8 heads"):
            check_destination((o, lse), 3, 8, 8)
