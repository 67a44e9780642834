"""Run by test_fp8_gemm.py in a subprocess with TRITON_INTERPRET=1: the block-FP8 GEMM kernel on the CPU.

Checks both methods (w8a8: activations quantized to e4m3; w8a16: activations as they are) with every kernel
variant (the tile settings in VARIANTS: quantization launch or fused, swapped MMA
sides, partials summed one or eight at a time; the few-rows kernel's settings) on dense, K-split and
grouped GEMMs (empty groups, rows past the last group) against fp32 math on the dequantized operands. The
interpreter's e4m3 cast does not carry a round-up into the exponent (31.7 -> 16, not 32), so rows quantized by
the kernel itself (fused) are fed values that are already on the e4m3 grid of their block scale (exact, no
rounding); other rows are quantized with torch. The GPU tests check the kernel's own rounding against
torch."""
import sys
from dataclasses import replace

import torch
from tests.runtime.interp import patch_index

patch_index()

from dcpctl.runtime.kernels.fp8_gemm import (BEFORE_TILES, DEFAULT_GEMV, MODES,  # noqa: E402
                                            DEQUANT, PREFILL_A16_TILES, PREFILL_GROUPED_A16_TILES,
                                            GemvTiles, Tiles, fp8_matmul, quantize_rows)
from dcpctl.runtime.kernels.fp8_tiles import tables_for  # noqa: E402
from tests.runtime.models.test_model_fp8 import quantize, reference_dequant  # noqa: E402

H200 = tables_for("NVIDIA H200", 90)     # every measured setting runs here too (grouped ones: once measured)
TABLE = [*H200.dense.values(), *H200.grouped.values()]               # each shape's (most rows, setting)
                                                                     # entries
TABLE_A16, GEMV_TABLE = [*H200.dense_a16.values(), *H200.grouped_a16.values()], H200.gemv

VARIANTS = [BEFORE_TILES, Tiles(fuse_rows=16, red=8), Tiles(swap=True),
            Tiles(bn=32, red=4, swap=True, fuse_rows=64), Tiles(bn=128, fuse_rows=64),
            Tiles(per_sm=4, max_split=3), Tiles(per_sm=4, max_split=2, swap=True),
            Tiles(bm=128, bn=32, swap=True),   # 128-row MMA tiles (prefill settings)
            *(t for entries in TABLE for _, t in entries),
            # the few-rows kernel: fused or launched quantization, slabs of 1-4 K blocks, rows in passes of
            # 1-16 (few programs per SM: the interpreter runs them one by one; K splits all the same)
            GemvTiles(per_sm=1), GemvTiles(fuse=False, per_sm=1),
            GemvTiles(bn=32, kb=1, bm=2, stages=1, per_sm=1),
            GemvTiles(bn=32, kb=4, fuse=False, bm=4, per_sm=1),
            *(replace(t, per_sm=1) for t in (DEFAULT_GEMV, *GEMV_TABLE.values()) if t is not None)]


# w8a16 differs from w8a8 only in the K loop's operands (no quantization, fused or not): a setting of each
# shape of work (plain, swapped, N tiles of 32 / 128, capped splits, the few-rows kernel in passes of 16 and
# of 2 rows)
A16_VARIANTS = list(dict.fromkeys([
    BEFORE_TILES, Tiles(swap=True), Tiles(bn=32, red=4, swap=True), Tiles(bn=128),
    Tiles(per_sm=4, max_split=3), Tiles(per_sm=4, max_split=2, swap=True), Tiles(bn=32, stages=4, per_sm=1),
    # the weight factor folded into the converted tile (fp32 rows: no rounding, so the same bound)
    Tiles(fold=True), Tiles(swap=True, fold=True), Tiles(per_sm=4, max_split=2, swap=True, fold=True),
    Tiles(bn=32, stages=4, per_sm=1, fold=True),
    Tiles(bm=128, bn=32, swap=True, fold=True), PREFILL_A16_TILES, PREFILL_GROUPED_A16_TILES,  # 128-row tiles
    *(t for entries in TABLE_A16 for _, t in entries),   # w8a16's own table
    GemvTiles(per_sm=1), GemvTiles(bn=32, kb=1, bm=2, stages=1, per_sm=1)]))


def _fused(t, R):
    return t.fuse if isinstance(t, GemvTiles) else R <= t.fuse_rows


def _ref_rows(x, b1):
    x8, s = quantize_rows(x, b1)
    return x8.float() * s[:, torch.arange(x.shape[1]) // b1]


def _rows(R, K, b1, on_grid):
    # [R, K]; on_grid: e4m3 values times a power-of-two scale per (row, K block), one |448| per block
    if not on_grid:
        return torch.randn(R, K)
    nkb = -(-K // b1)
    q = (torch.randn(R, nkb, b1) * 60).to(torch.float8_e4m3fn).float()
    q[:, :, 0] = 448.0 * torch.sign(torch.randn(R, nkb))
    return (q * 2.0 ** torch.randint(-4, 5, (R, nkb, 1)).float()).view(R, nkb * b1)[:, :K].contiguous()


def dense(R, N, K, block, sms, t, mode, dtype=torch.float32, a16_mma=None, spread=False):
    x, w = _rows(R, K, block[1], mode == "w8a8" and _fused(t, R)).to(dtype), torch.randn(N, K)
    if spread:   # rows whose K blocks span 2^-30 .. 2^30, some all zero, and one row near bf16's smallest
                 # normals
        x = (x.float() * 2.0 ** torch.randint(-30, 31, (R, 1, -(-K // block[1]))).repeat_interleave(
            block[1], -1)[:, 0, :K]).to(dtype)
        x[0, :block[1]] = 0
        # |x| in [2^-120, 2^-119): _fp16_rows' exponent clamp is what keeps its scale finite (all entries stay
        # normal: the interpreter converts bf16 subnormals wrongly)
        x[1] = ((1 + torch.rand(K)) * torch.randn(K).sign() * 2.0 ** -120).to(dtype)
    w8, s = quantize(w, block)
    got = fp8_matmul(x, w8, s, block, sms=sms, tiles=t, mode=mode, a16_mma=a16_mma).float()
    xr = _ref_rows(x, block[1]) if mode == "w8a8" else x.float()   # w8a16: the rows as they are
    return got, xr @ reference_dequant(w8, s, block).T


def grouped(ends, N, K, block, t, mode):
    E, R = len(ends), ends[-1] + 3   # three rows past the last group: other ranks' experts
    pairs = [quantize(torch.randn(N, K), block) for _ in range(E)]
    w8, s = torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])
    x = _rows(R, K, block[1], mode == "w8a8" and _fused(t, R))
    got = fp8_matmul(x, w8, s, block, ends=torch.tensor(ends, dtype=torch.int32), tiles=t, mode=mode)
    xr, ref, start = (_ref_rows(x, block[1]) if mode == "w8a8" else x), torch.zeros(R, N), 0
    for e, end in enumerate(ends):
        ref[start:end] = xr[start:end] @ reference_dequant(w8[e], s[e], block).T
        start = end
    return got, ref


def _err(cases, per_row: bool = False) -> float:
    """The worst relative error of (got, reference) pairs, max-abs over max |reference| (per_row: per row);
    inf where an output is NaN (max() over a sequence would skip a NaN that is not first)."""
    errs = [((g - r).abs().amax(1) / r.abs().amax(1)).max()
            if per_row else (g - r).abs().max() / r.abs().max()
            for g, r in cases]
    return max(float("inf") if e.isnan() else e.item() for e in errs)


def main() -> int:
    torch.manual_seed(0)
    worst = 0.0
    for mode in MODES:
        for t in (VARIANTS if mode == "w8a8" else A16_VARIANTS):
            cases = [dense(3, 40, 72, (16, 16), 132, t, mode), dense(17, 70, 256, (128, 128), 4, t, mode),
                     dense(1, 64, 96, (32, 32), 132, t, mode), dense(40, 24, 64, (8, 32), 1, t, mode),
                     dense(70, 40, 96, (16, 32), 132, t, mode),   # > M_TILE_ROWS: two M tiles, the second of
                                                                  # 6 rows
                     grouped([2, 2, 5, 9], 48, 64, (16, 16), t, mode),
                     grouped([0, 1, 1, 3, 3, 4], 40, 96, (16, 32), t, mode)]
            err = _err(cases)
            print(f"{mode} {t}: worst relative error {err:.2e}")
            worst = max(worst, err)
    # w8a16 with 16-bit rows: the e4m3 tiles converted to fp16 for a 16-bit dot (bf16 only on the GPU: the
    # interpreter's bf16 tl.dot multiplies raw bits); the fp16 output rounding is the error
    worst16 = 0.0
    # (folded: each e4m3 x factor rounded to fp16 as well, 2^-11 of each weight)
    for t in (BEFORE_TILES, Tiles(swap=True), Tiles(per_sm=4, max_split=2, swap=True), Tiles(bn=128),
              DEFAULT_GEMV, Tiles(fold=True), Tiles(swap=True, fold=True)):
        cases = [dense(3, 40, 72, (16, 16), 132, t, "w8a16", torch.float16),
                 dense(17, 70, 256, (128, 128), 4, t, "w8a16", torch.float16)]
        err = _err(cases)
        print(f"w8a16 fp16 rows {t}: worst relative error {err:.2e}")
        worst16 = max(worst16, err)
    # w8a16's fp16 MMA for bf16 rows (each row's K block scaled into fp16 by a power of two), over rows
    # spanning 2^60 and zero blocks: the products are the bf16 rows' own, so the error per row is the bf16
    # output's, which the interpreter truncates (up to 2^-7 of the row's largest; against the fp32 reference
    # truncated the same way the kernel was exact here). On an H200 the fp16 and bf16 MMAs gave bit-equal
    # outputs (h200_fp8_a16_mma_diag_s11.log)
    worst_f16 = 0.0
    # (folded settings take the bf16 MMA for bf16 rows, which the interpreter cannot run: fp32 / fp16 rows
    # above)
    for t in dict.fromkeys(t
                           for t in (BEFORE_TILES, Tiles(swap=True), Tiles(per_sm=4, max_split=2, swap=True),
                                     Tiles(bn=128), *(t for entries in TABLE_A16 for _, t in entries))
                           if not (isinstance(t, Tiles) and t.fold)):
        cases = [dense(3, 40, 72, (16, 16), 132, t, "w8a16", torch.bfloat16, "fp16", True),
                 dense(17, 70, 256, (128, 128), 4, t, "w8a16", torch.bfloat16, "fp16", True)]
        err = _err(cases, per_row=True)
        print(f"w8a16 bf16 rows, fp16 MMA {t}: worst relative error {err:.2e}")
        worst_f16 = max(worst_f16, err)
    # prefill under w8a16 (DequantLinear): the weight dequantized by the kernel equals quant.dequantize bit
    # for bit (partial scale blocks at the edges), and the GEMM is F.linear on it
    from dcpctl.runtime.kernels.fp8_dequant import dequantize_gpu
    from dcpctl.runtime.models.quant import dequantize
    exact = True
    for N, K, block in ((200, 300, (128, 128)), (70, 96, (16, 32)), (33, 64, (8, 64))):
        w8, s = quantize(torch.randn(N + 5, K), block)
        w8 = w8[:N]                                   # the first rows of a larger matrix: a partial last
                                                      # block
        s = s[:-(-N // block[0])]
        got = dequantize_gpu(w8, s, block, torch.float32)
        exact &= torch.equal(got, dequantize(w8, s, (0, N), (0, K), block))
        x = torch.randn(150, K)
        y = fp8_matmul(x, w8, s, block, tiles=DEQUANT, mode="w8a16")
        exact &= torch.equal(y, torch.nn.functional.linear(x, got))
    print(f"w8a16 prefill, the weight dequantized for F.linear: {'exact' if exact else 'NOT exact'}")
    return 0 if worst < 1e-5 and worst16 < 2e-3 and worst_f16 < 1e-2 and exact else 1


if __name__ == "__main__":
    sys.exit(main())
