"""The Gluon (Hopper) local MLA decode kernel against the float64 reference, and when it is chosen.

GPU tier: needs an sm_90 GPU and a Triton with Gluon; skipped elsewhere (CI has no GPU).  The Triton
kernel's tests (test_triton_mla.py) cover the shared wrapper: splits, merges, destinations.
"""
import math

import pytest
import torch

from dcpctl.runtime.attention import gluon_mla, triton_mla
from dcpctl.runtime.attention.triton_mla import mla_decode_reference
from tests.runtime.attention.test_triton_mla import check_triton_case, make_case

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
needs_hopper = pytest.mark.skipif(not (HOPPER and gluon_mla.gluon_available()),
                                  reason="the Gluon kernel needs an sm_90 GPU and Triton with Gluon")
GLUON = dict(block_h=64, num_warps=8)


def check_gluon_case(case, scale, **kw):
    """check_triton_case (whole-output bounds), then every query row on its own: one corrupted tile in one
    row of a long shard would hide under the whole-output norm."""
    got = check_triton_case(case, scale, 2e-2, **kw)
    for i, (g, rk) in enumerate(zip(got, case["ranks"])):
        w = mla_decode_reference(case["q"].to(rk["pool"].dtype).double(), rk["pool"].cpu().double(),
                                 rk["bt"].cpu(), rk["lens"].cpu(), case["row_req"], case["q_pos"],
                                 scale=scale, v_dim=case["v_dim"], dcp_rank=i, dcp_size=case["c"])
        seen = torch.isfinite(w.lse).all(-1)                     # rows that see at least one key
        err = (g.o - w.o).flatten(1).norm(dim=1) / w.o.flatten(1).norm(dim=1).clamp_min(1e-30)
        assert seen.any() and float(err[seen].max()) < 2e-2, err


def test_gluon_shared_memory_budget():
    # what the kernel allocates (ptxas: 229,904 B at 64 x 64 x 2 stages, R = 576; 225,824 B at 64 x 32 x 4)
    assert 229_904 <= gluon_mla.smem_bytes(64, 64, 2, 576) <= 232_448       # fits the H200's 227 KB
    assert 225_824 <= gluon_mla.smem_bytes(64, 32, 4, 576) <= 232_448
    assert gluon_mla.smem_bytes(64, 64, 2, 640) > 232_448                   # rope 128: too big, Triton runs
    assert gluon_mla.smem_bytes(64, 64, 3, 576) > 232_448


def test_gluon_is_not_chosen_off_hopper_or_for_fp8():
    cfg = triton_mla.KernelConfig(64, 32, 8, 4, gluon=True)
    # a CPU pool
    assert not triton_mla.use_gluon(cfg, torch.zeros(2, 64, 576, dtype=torch.bfloat16), 512)
    assert not triton_mla.use_gluon(cfg._replace(gluon=False), torch.zeros(1, 1, 576, dtype=torch.bfloat16),
                                    512)
    if HOPPER and gluon_mla.gluon_available():
        pool = torch.zeros(2, 64, 576, device="cuda", dtype=torch.bfloat16)
        assert triton_mla.use_gluon(cfg, pool, 512)
        assert not triton_mla.use_gluon(cfg._replace(num_warps=4), pool, 512)
        assert not triton_mla.use_gluon(cfg, pool[..., :48], 32)        # the tiny models' rows: Triton
        # a scaled 16-bit pool: Triton applies it
        assert not triton_mla.use_gluon(cfg, pool, 512, kv_scale=0.5)
        assert triton_mla.use_gluon(cfg, pool, 512, kv_scale=1.0)
        wide = torch.zeros(2, 64, 640, device="cuda", dtype=torch.bfloat16)
        # over shared memory
        assert not triton_mla.use_gluon(cfg._replace(block_n=64, num_stages=2), wide, 512)
        default = triton_mla.default_config(128)
        assert default.gluon and triton_mla.use_gluon(default, pool, 512)   # the default here
    elif torch.cuda.is_available():                                     # a CUDA GPU that is not Hopper
        pool = torch.zeros(2, 64, 576, device="cuda", dtype=torch.bfloat16)
        assert not triton_mla.use_gluon(cfg, pool, 512)
    if torch.cuda.is_available():
        fp8 = torch.zeros(2, 64, 576, device="cuda").to(torch.float8_e4m3fn)
        assert not triton_mla.use_gluon(cfg, fp8, 512)


@needs_hopper
@pytest.mark.parametrize("heads", [64, 128, 16, 96])
@pytest.mark.parametrize("block_n,stages,page", [(64, 2, 64), (32, 4, 64), (64, 2, 32), (32, 3, 16)])
def test_gluon_deepseek_shapes_vs_fp64(heads, block_n, stages, page):
    # 2 DCP ranks, 2 query tokens per request (causal by global position), lengths with partial tiles;
    # page % block_n == 0: whole tiles by bulk tensor copy and the last partial one by cp.async; else cp.async
    case = make_case(heads + block_n, [3, 300, 1500, 4100], 2, page=page, heads=heads, v_dim=512, rope=64,
                     tokens_per_req=2, dtype=torch.bfloat16, device="cuda", garbage="nan")
    cfg = triton_mla.KernelConfig(block_n=block_n, num_stages=stages, gluon=True, **GLUON)
    assert triton_mla.use_gluon(cfg, case["ranks"][0]["pool"], 512)
    check_gluon_case(case, 1 / math.sqrt(192), config=cfg)


@needs_hopper
@pytest.mark.parametrize("block_n", [64, 32])
@pytest.mark.parametrize("page,splits", [(16, 1), (1, 3), (48, None), (64, 7), (128, 2)])
def test_gluon_any_page_size_and_splits(page, splits, block_n):
    # rows are copied one by one through the page table: pages smaller than, larger than and not a
    # multiple of the tile; one split writes the destination itself, several go through the merge
    case = make_case(page, [1, 65, 700, 2000], 3, page=page, heads=128, v_dim=512, rope=64, tokens_per_req=3,
                     dtype=torch.bfloat16, device="cuda", garbage="nan")
    cfg = triton_mla.KernelConfig(block_n=block_n, num_stages=2 if block_n == 64 else 4, gluon=True, **GLUON)
    check_gluon_case(case, 1 / math.sqrt(192), num_splits=splits, config=cfg)


@needs_hopper
def test_gluon_fp16_pool_and_large_scale():
    case = make_case(3, [5, 900, 3000], 1, page=64, heads=64, v_dim=512, rope=64, tokens_per_req=1,
                     dtype=torch.float16, device="cuda")
    cfg = triton_mla.KernelConfig(block_n=32, num_stages=4, gluon=True, **GLUON)
    check_triton_case(case, 0.5, 2e-2, config=cfg)


@needs_hopper
@pytest.mark.parametrize("splits", [1, 3])
def test_gluon_writes_send_buffer_in_place(splits):
    from dcpctl.runtime.attention.comm import send_buffer, unpack
    c = 2
    case = make_case(11, [1, 90, 700], 2, page=64, heads=128, v_dim=512, rope=64, tokens_per_req=2,
                     dtype=torch.bfloat16, device="cuda")
    rk = case["ranks"][1]
    q = case["q"].to(torch.bfloat16).cuda()
    args = (q, rk["pool"], rk["bt"], rk["lens"], case["row_req"].int().cuda(), case["q_pos"].int().cuda())
    cfg = triton_mla.KernelConfig(block_n=32, num_stages=4, gluon=True, **GLUON)
    kw = dict(scale=1 / math.sqrt(192), v_dim=512, dcp_rank=1, dcp_size=2, num_splits=splits, config=cfg)
    want = triton_mla.mla_decode_triton(*args, **kw, out_dtype=torch.bfloat16)
    n = q.shape[0]
    send = send_buffer(n, 128, 512, c, torch.bfloat16, torch.device("cuda"))
    send.buf.fill_(7.0)
    triton_mla.mla_decode_triton(*args, **kw, out=(send.o, send.lse))
    o_back, lse_back = unpack(send.buf, 512, torch.bfloat16)
    # o: the two merges are one kernel specialized for different destination strides (the send buffer's rows
    # hold the LSE lanes too); measured on an H200: 3 of 393216 values one bf16 step apart, each at a rounding
    # tie of the fp32 result (the in-place one equal to the fp32 result rounded to nearest even, the returned
    # one the other way). The layout is what this checks: equal but for a few values at most one step apart
    w = want.o.view(n, c, 64, 512).transpose(0, 1)
    steps = (o_back.contiguous().view(torch.int16).int() - w.contiguous().view(torch.int16).int()).abs()
    assert int(steps.max()) <= 1 and int((steps > 0).sum()) <= 8
    torch.testing.assert_close(lse_back, want.lse.view(n, c, 64).transpose(0, 1), atol=0, rtol=0)


@needs_hopper
@pytest.mark.parametrize("block_n,stages,page", [(64, 2, 64), (32, 4, 64), (64, 2, 16), (32, 3, 16)])
def test_gluon_is_deterministic(block_n, stages, page):
    # the same launch gives the same bits: a stage or P buffer reused too early would show here first
    case = make_case(17, [64, 1000, 5000, 5001], 1, page=page, heads=128, v_dim=512, rope=64,
                     tokens_per_req=4, dtype=torch.bfloat16, device="cuda")
    rk = case["ranks"][0]
    q = case["q"].to(torch.bfloat16).cuda()
    cfg = triton_mla.KernelConfig(block_n=block_n, num_stages=stages, gluon=True, **GLUON)
    runs = [triton_mla.mla_decode_triton(q, rk["pool"], rk["bt"], rk["lens"], case["row_req"].int().cuda(),
                                         case["q_pos"].int().cuda(), scale=1 / math.sqrt(192), v_dim=512,
                                         num_splits=3, config=cfg) for _ in range(6)]
    for r in runs[1:]:
        assert torch.equal(r.o, runs[0].o) and torch.equal(r.lse, runs[0].lse)
