"""The block-FP8 GEMM kernel: on the CPU through Triton's interpreter; on a GPU against torch math."""
from __future__ import annotations

import functools
import re

import pytest
import torch

from tests.runtime.interp import run_in_interpreter


def test_kernel_in_the_interpreter_matches_dequantized_math():
    run_in_interpreter("tests/runtime/fp8_interp_check.py")


def test_fp8_model_in_the_interpreter_matches_its_dequantized_twin_per_method():
    run_in_interpreter("tests/runtime/fp8_model_interp_check.py")


def _rows_ref(x, mode, K):
    """The rows the method multiplies, as fp32: w8a8 its 1x128 e4m3 quantization, w8a16 the rows
    themselves."""
    if mode == "w8a16":
        return x.float()
    from dcpctl.runtime.kernels.fp8_gemm import quantize_rows
    x8, xs = quantize_rows(x, 128)
    return x8.float() * xs.repeat_interleave(128, 1)[:, :K]


def test_activation_mode_from_the_launch_config():
    from dcpctl.contract.fields import LaunchConfigError, parse_value
    from dcpctl.contract.launch_config import RuntimeSection
    from dcpctl.runtime import settings
    from dcpctl.runtime.kernels import fp8_parts
    assert fp8_parts.activation_mode() == "auto"
    with settings.using(fp8_gemm="w8a8"):
        assert fp8_parts.activation_mode() == "w8a8"
    assert fp8_parts.activation_mode() == "auto"
    with pytest.raises(LaunchConfigError, match="runtime.fp8_gemm is 'fp8'; valid: auto, w8a16, w8a8"):
        parse_value(RuntimeSection, {"fp8_gemm": "fp8"}, "runtime")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("R", [1, 7, 64, 300])
@pytest.mark.parametrize("N,K", [(1536, 7168), (7168, 2048), (576, 7168)])
@pytest.mark.parametrize("mode", ["w8a8", "w8a16"])
def test_gpu_kernel_matches_torch_quantized_math(R, N, K, mode):
    from dcpctl.runtime.kernels.fp8_gemm import fp8_matmul, quantize_rows, quantize_rows_gpu
    from tests.runtime.models.test_model_fp8 import quantize, reference_dequant
    torch.manual_seed(R)
    x, w = torch.randn(R, K, device="cuda", dtype=torch.bfloat16), torch.randn(N, K, device="cuda")
    w8, s = quantize(w.cpu(), (128, 128))
    w8, s = w8.cuda(), s.cuda()
    got = fp8_matmul(x, w8, s, (128, 128), mode=mode).float()
    x8, xs = quantize_rows(x, 128)
    g8, gs = quantize_rows_gpu(x, 128)
    assert torch.equal(g8.view(torch.uint8), x8.view(torch.uint8)) and torch.equal(gs, xs)
    ref = _rows_ref(x, mode, K) @ reference_dequant(w8.cpu(), s.cpu(), (128, 128)).cuda().T
    err = (got - ref).abs().max() / ref.abs().max()
    assert err < (1e-2 if mode == "w8a8" else 5e-3), err   # bf16 output rounding; the same operands


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("R", [1, 5, 16, 40])
@pytest.mark.parametrize("swap", [False, True])
def test_gpu_fused_quantization_equals_the_quantization_launch(R, swap):
    # the same tiles but for where the rows are quantized: the same e4m3 operands, the same sums, bit-equal
    from dcpctl.runtime.kernels.fp8_gemm import Tiles, fp8_matmul
    from tests.runtime.models.test_model_fp8 import quantize
    torch.manual_seed(R)
    w8, s = (t.cuda() for t in quantize(torch.randn(1536, 7168), (128, 128)))
    x = torch.randn(R, 7168, device="cuda", dtype=torch.bfloat16) * 3
    two = fp8_matmul(x, w8, s, (128, 128), tiles=Tiles(fuse_rows=0, swap=swap), mode="w8a8")
    one = fp8_matmul(x, w8, s, (128, 128), tiles=Tiles(fuse_rows=64, swap=swap), mode="w8a8")
    torch.testing.assert_close(one, two, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("tiles", ["before", "swap", "bn128", "red1", "pdl", "bm128"])
@pytest.mark.parametrize("R", [1, 8, 64, 200])   # 200: rows tiled over programs (M_TILE_ROWS)
@pytest.mark.parametrize("mode", ["w8a8", "w8a16"])
def test_gpu_tile_variants_match_torch_quantized_math(tiles, R, mode):
    from dcpctl.runtime.kernels.fp8_gemm import BEFORE_TILES, Tiles, fp8_matmul
    from tests.runtime.models.test_model_fp8 import quantize, reference_dequant
    t = {"before": BEFORE_TILES, "swap": Tiles(swap=True, fuse_rows=64),
         "bn128": Tiles(bn=128, stages=4, per_sm=1), "red1": Tiles(red=1, per_sm=4),
         "pdl": Tiles(pdl=True, fuse_rows=64), "bm128": Tiles(bm=128, bn=128, warps=8)}[tiles]
    torch.manual_seed(R)
    x, w = torch.randn(R, 2048, device="cuda", dtype=torch.bfloat16), torch.randn(7168, 2048)
    w8, s = quantize(w, (128, 128))
    got = fp8_matmul(x, w8.cuda(), s.cuda(), (128, 128), tiles=t, mode=mode).float()
    ref = _rows_ref(x, mode, 2048) @ reference_dequant(w8, s, (128, 128)).cuda().T
    assert ((got - ref).abs().max() / ref.abs().max()) < (1e-2 if mode == "w8a8" else 5e-3)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mode", ["w8a8", "w8a16"])
def test_gpu_grouped_kernel_is_graph_safe(mode):
    from dcpctl.runtime.kernels.fp8_gemm import fp8_matmul
    from tests.runtime.models.test_model_fp8 import quantize
    pairs = [quantize(torch.randn(256, 512), (128, 128)) for _ in range(4)]
    w8 = torch.stack([p[0] for p in pairs]).cuda()
    s = torch.stack([p[1] for p in pairs]).cuda()
    x = torch.randn(12, 512, device="cuda", dtype=torch.bfloat16)
    ends = torch.tensor([3, 3, 9, 10], dtype=torch.int32, device="cuda")
    eager = fp8_matmul(x, w8, s, (128, 128), ends=ends, mode=mode)
    torch.cuda.set_sync_debug_mode("error")
    try:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = fp8_matmul(x, w8, s, (128, 128), ends=ends, mode=mode)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    g.replay()
    torch.testing.assert_close(out, eager, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("tiles", [dict(), dict(fold=True),
                                   dict(bm=128, bn=128, warps=8, fold=True)])     # PREFILL_GROUPED_A16_TILES
def test_gpu_grouped_w8a16_at_prefill_rows_per_expert(tiles):
    # a prefill's routed experts: hundreds of rows per expert, some experts empty; each group against the
    # dequantized weight's F.linear (folded: each weight is the dequantized one, so only the fp32 sum order
    # differs)
    from dcpctl.runtime.kernels.fp8_gemm import Tiles, fp8_matmul
    from dcpctl.runtime.models.quant import dequantize
    from tests.runtime.models.test_model_fp8 import quantize
    N, K, counts = 640, 1024, [300, 0, 129, 1, 64, 0, 700]
    pairs = [quantize(torch.randn(N, K) * 0.02, (128, 128)) for _ in counts]
    w8, s = torch.stack([p[0] for p in pairs]).cuda(), torch.stack([p[1] for p in pairs]).cuda()
    ends = torch.tensor(counts, dtype=torch.int32).cumsum(0).to(torch.int32).cuda()
    x = torch.randn(sum(counts) + 5, K, device="cuda", dtype=torch.bfloat16)     # 5 rows past the last group
    got = fp8_matmul(x, w8, s, (128, 128), ends=ends, tiles=Tiles(**tiles), mode="w8a16").float()
    start = 0
    for e, n in enumerate(counts):
        wb = dequantize(w8[e], s[e], (0, N), (0, K), (128, 128)).to(torch.bfloat16)
        want = torch.nn.functional.linear(x[start:start + n].double(), wb.double()).float()
        if n:
            assert ((got[start:start + n] - want).norm() / want.norm()).item() < 5e-3, e
        start += n


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mode", ["w8a8", "w8a16"])
def test_gpu_split_k_counts_reset_across_calls_and_replays(mode):
    # decode shape with K splits: the last program of each tile sums the partials and zeroes its count
    from dcpctl.runtime.kernels.fp8_gemm import fp8_matmul
    from tests.runtime.models.test_model_fp8 import quantize
    w8, s = (t.cuda() for t in quantize(torch.randn(1536, 7168), (128, 128)))
    x = torch.randn(1, 7168, device="cuda", dtype=torch.bfloat16)
    first = fp8_matmul(x, w8, s, (128, 128), mode=mode)
    for _ in range(3):
        torch.testing.assert_close(fp8_matmul(x, w8, s, (128, 128), mode=mode), first, rtol=0, atol=0)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fp8_matmul(x, w8, s, (128, 128), mode=mode)
    for _ in range(3):
        out.zero_()
        g.replay()
        torch.testing.assert_close(out, first, rtol=0, atol=0)


@pytest.mark.parametrize("v", [
    dict(bm=16, bn=64, quant=True, split=True, swap=False, red=8, grouped=False),    # decode: one launch
    # weight rows on wgmma's M side
    dict(bm=16, bn=64, quant=True, split=True, swap=True, red=8, grouped=False),
    dict(bm=64, bn=64, quant=False, split=False, swap=False, red=1, grouped=True),   # MoE prefill
    dict(bm=16, bn=64, quant=True, split=True, swap=False, red=8, grouped=False, pdl=True),   # early launch
    dict(bm=16, bn=64, quant=False, split=True, swap=False, red=1, grouped=False, a16=True),  # w8a16 decode
    dict(bm=16, bn=64, quant=False, split=True, swap=True, red=1, grouped=False, a16=True),
    # w8a16 MoE prefill
    dict(bm=64, bn=64, quant=False, split=False, swap=False, red=1, grouped=True, a16=True),
    # fp16 MMA
    dict(bm=16, bn=64, quant=False, split=True, swap=False, red=1, grouped=False, a16=True, f16=True),
    dict(bm=16, bn=64, quant=False, split=True, swap=True, red=1, grouped=False, a16=True, f16=True),
])
def test_kernel_compiles_for_sm90_with_pipelined_weight_loads(v):
    pytest.importorskip("triton")
    from tests.runtime.fp8_compile_check import Variant, compile_sm90
    try:
        k = compile_sm90(Variant(**v))
    except (RuntimeError, FileNotFoundError) as e:   # no ptxas in this Triton build
        if "ptxas" not in str(e):
            raise
        pytest.skip(f"Triton cannot compile for sm_90 here: {e}")
    ptx = k.asm["ptx"]
    assert ("wgmma" in ptx) == (v["swap"] or v["bm"] == 64), "MMA kind"
    assert ptx.count("cp.async.commit_group") >= 3, "the K loop's loads are not software-pipelined"
    assert ("griddepcontrol.wait" in ptx) == v.get("pdl", False)
    if v.get("a16"):    # w8a16: a bf16 MMA over the converted weight tiles, or (f16) an fp16 one
        kind = "f16" if v.get("f16") else "bf16"
        assert re.search(rf"(wgmma\.mma_async|mma)\.[^\n]*\.{kind}\.{kind}", ptx), "MMA operand type"
        # e4m3 -> fp16 is one conversion a pair; the bf16 MMA adds a scalar fp16 -> bf16 one per weight
        # element
        assert ("cvt.bf16.f16" in ptx) == (kind == "bf16")


@pytest.mark.parametrize("bm,swap", [(16, True), (64, True), (64, False)])
def test_folded_w8a16_accumulates_in_the_mma(bm, swap):
    # Tiles.fold: the weight factor goes into the converted tile, so the K loop is one MMA chain (the wait for
    # a K block's MMA moves past the next block's loads and conversion) instead of an MMA, a wait and a scaled
    # add
    pytest.importorskip("triton")
    from tests.runtime.fp8_compile_check import Variant, compile_sm90
    try:
        k = compile_sm90(Variant(bm=bm, bn=64, quant=False, split=True, swap=swap, red=1, grouped=False,
                                 a16=True, fold=True))
    except (RuntimeError, FileNotFoundError) as e:   # no ptxas in this Triton build
        if "ptxas" not in str(e):
            raise
        pytest.skip(f"Triton cannot compile for sm_90 here: {e}")
    loop = k.asm["ttgir"].split("scf.for %acc")[1].split("scf.yield")[0]     # the K loop's body
    assert "warp_group_dot " in loop and "arith.mulf" in loop.split("warp_group_dot ")[0], \
        "the factor before the MMA"
    if swap:   # the converted tile is the MMA's register operand: nothing in the loop waits for the last MMA
        assert "pendings = 0" not in loop
    unfolded = compile_sm90(Variant(bm=bm, bn=64, quant=False, split=True, swap=swap, red=1, grouped=False,
                                    a16=True))
    assert "pendings = 0" in unfolded.asm["ttgir"].split("scf.for %acc")[1].split("scf.yield")[0]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("R", [1, 8, 32, 64, 300])      # 300: rows tiled over programs (M_TILE_ROWS)
@pytest.mark.parametrize("tiles",
                         [dict(fold=True), dict(swap=True, fold=True), dict(bn=32, stages=4, fold=True),
                          dict(per_sm=4, swap=True, max_split=4, fold=True),
                          dict(bm=128, bn=128, warps=8, fold=True), dict(bm=128, swap=True, fold=True),
                          dict(bm=128, bn=64, warps=8, fold=True)])        # PREFILL_A16_TILES
def test_gpu_folded_w8a16_equals_the_dequantized_linear(R, tiles):
    # folded, each weight is e4m3 x factor rounded to bf16: the dequantized checkpoint's weight bit for bit,
    # so the GEMM is F.linear on it but for the order of the fp32 sums
    from dcpctl.runtime.kernels.fp8_gemm import Tiles, fp8_matmul
    from dcpctl.runtime.models.quant import dequantize
    from tests.runtime.models.test_model_fp8 import quantize
    N, K = 2112, 7168
    w8, s = (t.cuda() for t in quantize(torch.randn(N, K) * 0.02, (128, 128)))
    wb = dequantize(w8, s, (0, N), (0, K), (128, 128)).to(torch.bfloat16)
    x = torch.randn(R, K, device="cuda", dtype=torch.bfloat16)
    got = fp8_matmul(x, w8, s, (128, 128), tiles=Tiles(**tiles), mode="w8a16").float()
    want = torch.nn.functional.linear(x.double(), wb.double()).float()
    assert ((got - want).norm() / want.norm()).item() < 4e-3      # the bf16 output rounding, not the weights


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("R", [129, 300, 2048])
@pytest.mark.parametrize("N,K", [(2112, 7168), (7168, 2048), (24576, 1536), (1000, 300)])
def test_gpu_prefill_w8a16_is_the_dequantized_paths_gemm(R, N, K):
    # above PREFILL_DEQUANT_ROWS rows w8a16 dequantizes the weight for cuBLAS: the bf16 path's GEMM, bit for
    # bit (1000 x 300: partial scale blocks at both edges)
    from dcpctl.runtime.kernels.fp8_gemm import DEQUANT, PREFILL_DEQUANT_ROWS, choose_tiles, fp8_matmul
    from dcpctl.runtime.models.quant import dequantize
    from tests.runtime.models.test_model_fp8 import quantize
    assert R > PREFILL_DEQUANT_ROWS and choose_tiles(N, K, R, a16=True) == DEQUANT
    w8, s = (t.cuda() for t in quantize(torch.randn(N, K) * 0.02, (128, 128)))
    wb = dequantize(w8, s, (0, N), (0, K), (128, 128)).to(torch.bfloat16)
    x = torch.randn(R, K, device="cuda", dtype=torch.bfloat16)
    assert torch.equal(fp8_matmul(x, w8, s, (128, 128), mode="w8a16"), torch.nn.functional.linear(x, wb))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mode", ["w8a8", "w8a16"])
def test_gpu_early_launched_chain_in_a_graph_equals_the_plain_one(mode):
    # three dependent GEMMs (each reads the previous one's output, all share the tile counts) launched
    # early (PDL) inside a CUDA graph: each must wait for the one before; bit-equal to plain launches
    from dcpctl.runtime.kernels.fp8_gemm import Tiles, fp8_matmul
    from tests.runtime.models.test_model_fp8 import quantize
    ws = [tuple(t.cuda() for t in quantize(torch.randn(2048, 2048), (128, 128))) for _ in range(3)]
    x = torch.randn(4, 2048, device="cuda", dtype=torch.bfloat16)

    def chain(t):
        y = x
        for w8, s in ws:
            y = fp8_matmul(y, w8, s, (128, 128), tiles=t, mode=mode) / 40
        return y
    want = chain(Tiles(fuse_rows=64))
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = chain(Tiles(fuse_rows=64, pdl=True))
    for _ in range(3):
        out.zero_()
        g.replay()
        torch.testing.assert_close(out, want, rtol=0, atol=0)


def _h200():
    from dcpctl.runtime.kernels.fp8_tiles import tables_for
    return tables_for("NVIDIA H200", 90)


def test_the_h200_table_loads_as_measured():
    from dcpctl.runtime.kernels.fp8_tiles import Fp8Tables, Tiles, tables_for
    t = _h200()
    assert t.how == "measured on this GPU (NVIDIA H200, commit eb0137e)"
    assert t.dense[(7168, 16384)] == ((16, Tiles()), (32, Tiles(per_sm=4, swap=True, max_split=4)),
                                      (64, Tiles(stages=5, per_sm=1)))
    assert t.dense_a16[(2112, 7168)] == ((32, Tiles(swap=True, fold=True)),
                                         (64, Tiles(per_sm=4, swap=True, max_split=4, fold=True)))
    assert t.gemv == {(24576, 1536): None} and (len(t.dense), len(t.dense_a16)) == (6, 7)
    # V3's dense MLP at TP 1 (fp8_serve.py's checkpoint), swept at 8-64 rows
    assert t.dense_a16[(36864, 7168)][-1] == (64,
                                              Tiles(bn=128, warps=8, stages=4, per_sm=4, swap=True,
                                                    max_split=4, fold=True))
    assert [m for m, _ in t.dense_a16[(7168, 18432)]] == [16, 32, 64]
    assert tables_for("NVIDIA H100 80GB HBM3", 90).dense == t.dense          # the nearest sm_90 table
    assert tables_for("NVIDIA B200", 100) == Fp8Tables(how="no fp8_gemm table for NVIDIA B200 or another "
                                                           "sm_100 GPU: built-in defaults")


def test_few_rows_pick_the_weight_streaming_kernel():
    from dcpctl.runtime.kernels.fp8_gemm import DEFAULT_GEMV, GEMV_ROWS, Tiles
    from dcpctl.runtime.kernels.fp8_tiles import choose_tiles as choose
    t = _h200()
    choose_tiles = lambda *a, **k: choose(*a, **k, tables=t)  # noqa: E731
    assert choose_tiles(7168, 16384, 1) == DEFAULT_GEMV
    assert isinstance(choose_tiles(7168, 16384, GEMV_ROWS + 1), Tiles)
    # q_b_proj: the MMA kernel measured faster
    assert isinstance(choose_tiles(24576, 1536, 1), Tiles)
    assert choose(24576, 1536, 1) == DEFAULT_GEMV                          # no table (CPU): the rule alone
    assert isinstance(choose_tiles(4096, 7168, 1, experts=256), Tiles)    # grouped: the MMA kernel
    # w8a16: grouped GEMMs of up to GROUPED_GEMV_ROWS rows in all on the few-rows kernel, more on the MMA
    # kernel
    from dcpctl.runtime.kernels.fp8_gemm import GROUPED_GEMV_ROWS
    assert choose_tiles(4096, 7168, 1, 256, a16=True, total_rows=GROUPED_GEMV_ROWS) == DEFAULT_GEMV
    assert isinstance(choose_tiles(4096, 7168, 1, 256, a16=True, total_rows=GROUPED_GEMV_ROWS + 1), Tiles)
    # and at most GROUPED_GEMV_PER_EXPERT rows an expert: 16 experts x top-8 at batch 8 (64 rows) takes the
    # MMA
    from dcpctl.runtime.kernels.fp8_tiles import GROUPED_GEMV_PER_EXPERT
    assert choose_tiles(4096, 7168, 2, 16, a16=True, total_rows=16 * GROUPED_GEMV_PER_EXPERT) == DEFAULT_GEMV
    assert isinstance(choose_tiles(4096, 7168, 4, 16, a16=True, total_rows=64), Tiles)
    assert isinstance(choose_tiles(4096, 7168, 1, 256, a16=False, total_rows=8), Tiles)
    # a prefill's experts: above M_TILE_ROWS rows per expert each method takes its own 128-row setting (w8a8's
    # without a table entry: the H200 table has no w8a8 grouped section)
    from dcpctl.runtime.kernels.fp8_gemm import DEFAULT_TILES, M_TILE_ROWS, PREFILL_GROUPED_A16_TILES
    from dcpctl.runtime.kernels.fp8_tiles import PREFILL_GROUPED_A8_TILES
    assert (choose_tiles(4096, 7168, M_TILE_ROWS + 1, 16, a16=True, total_rows=16 * 65)
            == PREFILL_GROUPED_A16_TILES)
    tuned = t.grouped_a16[(4096, 7168)][-1]          # the table's grouped w8a16 setting at its largest bound
    assert tuned[0] == M_TILE_ROWS and tuned[1] != DEFAULT_TILES
    assert choose_tiles(4096, 7168, M_TILE_ROWS, 16, a16=True, total_rows=16 * 64) == tuned[1]
    assert (choose_tiles(4096, 7168, M_TILE_ROWS + 1, 16, a16=False, total_rows=16 * 65)
            == PREFILL_GROUPED_A8_TILES)


def test_w8a16_takes_its_own_table_where_it_has_the_shape():
    from dcpctl.runtime.kernels.fp8_tiles import choose_tiles
    tab = _h200()
    for (n, k), entries in tab.dense_a16.items():
        for most, t in entries:
            assert choose_tiles(n, k, most, a16=True, tables=tab) == t
    # a shape only `dense` has: both use it
    shared = next(key for key in tab.dense if key not in tab.dense_a16)
    assert all(choose_tiles(*shared, most, a16=True, tables=tab) == t
               == choose_tiles(*shared, most, tables=tab)
               for most, t in tab.dense[shared])


@pytest.mark.parametrize("quant,split,grouped,bm,stages,a16", [
    (True, True, False, 1, 3, False), (True, True, False, 16, 3, False), (False, True, False, 4, 1, False),
    (True, False, True, 2, 1, False), (True, False, True, 2, 3, False), (False, True, False, 1, 1, True),
    (False, False, True, 2, 1, True)])
def test_gemv_compiles_for_sm90_with_wide_weight_loads(quant, split, grouped, bm, stages, a16):
    pytest.importorskip("triton")
    from tests.runtime.fp8_compile_check import compile_gemv_sm90
    try:
        k = compile_gemv_sm90(16, 2, bm, quant, split, grouped, stages=stages, a16=a16)
    except (RuntimeError, FileNotFoundError) as e:   # no ptxas in this Triton build
        if "ptxas" not in str(e):
            raise
        pytest.skip(f"Triton cannot compile for sm_90 here: {e}")
    ptx = k.asm["ptx"]
    assert "mma" not in ptx
    # the [16, 2 x 128] e4m3 slab is 4 KiB: 32 bytes a thread of 128, in 16-byte pieces; pipelined (stages >
    # 1) they go to shared memory by cp.async ahead of their use
    if stages == 1:
        assert ptx.count("ld.global.v4.b32") >= 2, "the weight is not read in 16-byte loads"
    else:
        assert re.search(r"cp\.async\.cg\.shared\.global .*, "
                         r"0x10,", ptx), "the weight loads are not pipelined"
        assert ptx.count("cp.async.commit_group") >= stages
    assert ("atom.global" in ptx) == split


@functools.lru_cache(maxsize=4)
def _gemv_weight(N, K):
    # one quantized weight per shape for all the tests of it: e4m3 and factors on the GPU, its real value
    # (fp32)
    from tests.runtime.models.test_model_fp8 import quantize, reference_dequant
    torch.manual_seed(N + K)
    w8, s = quantize(torch.randn(N, K), (128, 128))
    return w8.cuda(), s.cuda(), reference_dequant(w8, s, (128, 128)).cuda()


def _gemv_case(R, N, K, seed):
    torch.manual_seed(seed)
    return (torch.randn(R, K, device="cuda", dtype=torch.bfloat16) * 3, *_gemv_weight(N, K))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("R", [1, 3, 16])
@pytest.mark.parametrize("N,K", [(2112, 7168), (7168, 2048), (24576, 1536)])
@pytest.mark.parametrize("tiles", ["shipped", "launch", "pipelined", "bm2"])
@pytest.mark.parametrize("mode", ["w8a8", "w8a16"])
def test_gpu_gemv_matches_torch_quantized_math(R, N, K, tiles, mode):
    # 2112 = q_a_proj + kv_a_proj joined: its last scale block holds 64 rows
    from dcpctl.runtime.kernels.fp8_gemm import DEFAULT_GEMV, GemvTiles, fp8_matmul
    t = {"shipped": DEFAULT_GEMV, "launch": GemvTiles(fuse=False, stages=1),
         "pipelined": GemvTiles(bn=32, stages=3),
         "bm2": GemvTiles(bn=8, kb=1, bm=2, per_sm=16, stages=1)}[tiles]
    x, w8, s, real = _gemv_case(R, N, K, R)
    got = fp8_matmul(x, w8, s, (128, 128), tiles=t, mode=mode).float()
    ref = _rows_ref(x, mode, K) @ real.T
    # bf16 output rounding
    assert ((got - ref).abs().max() / ref.abs().max()) < (1e-2 if mode == "w8a8" else 5e-3)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("R", [1, 5, 16])
def test_gpu_gemv_fused_quantization_equals_the_quantization_launch(R):
    from dcpctl.runtime.kernels.fp8_gemm import GemvTiles, fp8_matmul
    x, w8, s, _ = _gemv_case(R, 2112, 7168, R)
    one = fp8_matmul(x, w8, s, (128, 128), tiles=GemvTiles(fuse=True, stages=1), mode="w8a8")
    two = fp8_matmul(x, w8, s, (128, 128), tiles=GemvTiles(fuse=False, stages=1), mode="w8a8")
    torch.testing.assert_close(one, two, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mode", ["w8a8", "w8a16"])
def test_gpu_grouped_gemv_in_a_graph_matches_per_expert_math(mode):
    # decode routing: 3 tokens x top-2 over 16 experts, one expert chosen twice, rows past ends[-1] untouched
    from dcpctl.runtime.kernels.fp8_gemm import GemvTiles, fp8_matmul
    from tests.runtime.models.test_model_fp8 import quantize, reference_dequant
    torch.manual_seed(0)
    pairs = [quantize(torch.randn(384, 1024), (128, 128)) for _ in range(16)]
    w8 = torch.stack([p[0] for p in pairs]).cuda()
    s = torch.stack([p[1] for p in pairs]).cuda()
    counts = torch.zeros(16, dtype=torch.int64)
    counts[[2, 5, 9, 11]] = torch.tensor([1, 2, 1, 1])
    ends = counts.cumsum(0).to(torch.int32)
    x, ends_d, t = (torch.randn(7, 1024, device="cuda", dtype=torch.bfloat16), ends.cuda(),
                    GemvTiles(bm=1, stages=1))
    eager = fp8_matmul(x, w8, s, (128, 128), ends=ends_d, tiles=t, mode=mode)   # compiles outside the capture
    torch.cuda.set_sync_debug_mode("error")
    try:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = fp8_matmul(x, w8, s, (128, 128), ends=ends_d, tiles=t, mode=mode)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    g.replay()
    torch.testing.assert_close(out, eager, rtol=0, atol=0)
    xr = _rows_ref(x, mode, 1024).cpu()
    ref, start = torch.zeros(7, 384), 0
    for e, end in enumerate(ends.tolist()):
        ref[start:end] = xr[start:end] @ reference_dequant(*pairs[e], (128, 128)).T
        start = end
    got = out.float().cpu()
    assert ((got - ref).abs().max() / ref.abs().max()) < 1e-2
    assert torch.equal(got[5:], torch.zeros(2, 384))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mode", ["w8a8", "w8a16"])
def test_gpu_gemv_split_counts_reset_across_replays(mode):
    from dcpctl.runtime.kernels.fp8_gemm import GemvTiles, fp8_matmul
    x, w8, s, _ = _gemv_case(2, 7168, 4096, 0)
    t = GemvTiles(per_sm=16, stages=1)
    first = fp8_matmul(x, w8, s, (128, 128), tiles=t, mode=mode)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fp8_matmul(x, w8, s, (128, 128), tiles=t, mode=mode)
    for _ in range(3):
        out.zero_()
        g.replay()
        torch.testing.assert_close(out, first, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("R", [1, 7, 65, 300])
@pytest.mark.parametrize("N,K", [(2112, 7168), (7168, 2048)])
def test_gpu_cublas_w8a8_matches_the_triton_w8a8_kernel(R, N, K):
    # the same e4m3 operands and factors (the rows quantized alike), only the order of fp32 sums differs
    from dcpctl.runtime.kernels import fp8_cublas
    from dcpctl.runtime.kernels.fp8_gemm import DEFAULT_TILES, fp8_matmul
    from tests.runtime.models.test_model_fp8 import quantize, reference_dequant
    ok, why = fp8_cublas.probe("cuda")
    if not ok:
        pytest.skip(why)
    torch.manual_seed(R)
    w8, s = quantize(torch.randn(N, K), (128, 128))
    x = torch.randn(R, K, device="cuda", dtype=torch.bfloat16)
    got = fp8_cublas.cublas_matmul(x, w8.cuda(), s.cuda()).float()
    assert got.shape == (R, N)
    ref = _rows_ref(x, "w8a8", K) @ reference_dequant(w8, s, (128, 128)).cuda().T
    assert ((got - ref).abs().max() / ref.abs().max()) < 1e-2
    tri = fp8_matmul(x, w8.cuda(), s.cuda(), (128, 128), tiles=DEFAULT_TILES, mode="w8a8").float()
    assert ((got - tri).norm() / tri.norm()) < 5e-3
    # auto: the table's method or the rule's (w8a16 at decode rows), each against its own rows' reference
    from dcpctl.runtime.kernels import fp8_tiles
    m = fp8_tiles.method(N, K, R, 1, "auto", device=x.device)
    auto = fp8_matmul(x, w8.cuda(), s.cuda(), (128, 128), mode="auto").float()
    ref = _rows_ref(x, "w8a16" if m == "w8a16" else "w8a8", K) @ reference_dequant(w8, s, (128, 128)).cuda().T
    assert ((auto - ref).abs().max() / ref.abs().max()) < (5e-3 if m == "w8a16" else 1e-2), m
