"""Block-scaled FP8 GEMM (Triton): y = x @ W^T with W in e4m3 and one fp32 factor per (b0 x b1) block.

    fp8_matmul(x, w8, scale, block, ends=None) -> [R, N] in x.dtype

Two methods (fp8_parts.MODES, the launch config's runtime.fp8_gemm, decided by the plan):
- w8a16 (default): x stays in its 16-bit dtype; each e4m3 weight tile is converted in registers (exact) for a
  16-bit MMA, times the weight block's factor: the dequantized weight's GEMM but for the order of the fp32 sums
  (and the bf16 rounding of a dequantized weight, which this skips), at half its weight bytes. bf16 rows in tiles
  of 16 go through an fp16 MMA, each row's K block scaled into fp16 by a power of two (A16_MMA: the same products,
  a cheaper weight conversion); larger tiles through a bf16 MMA. Where TABLE_A16 folds (`Tiles.fold`: 17-64 rows
  of the measured shapes) the factor goes into the converted tile, rounded to x's dtype as the dequantized
  checkpoint's weight is, so that the MMA accumulates over K without a wait per K block.
- w8a8: the activations are quantized per token and per K block of b1 columns, as DeepSeek's inference code
  and SGLang/vLLM do (`s = amax(|x|) / 448`, `x8 = x / s`), for an e4m3 MMA: for up to `Tiles.fuse_rows` rows
  inside the GEMM itself (each program quantizes the rows of its K blocks as it loads them: one launch), above
  that by a small launch first.
The GEMM reads W once in all: at decode sizes the weight read is the whole cost.

| argument | shape                        | meaning                                                    |
| -------- | ---------------------------- | ---------------------------------------------------------- |
| x        | [R, K]  16/32-bit            | rows; grouped: sorted by expert, expert e owns [ends[e-1], ends[e]) |
| w8       | [N, K] or [E, N, K] e4m3     | the weight (one matrix per expert when grouped)            |
| scale    | [ceil(N/b0), ceil(K/b1)] (+E) | real W = w8 * scale[n // b0, k // b1]                      |
| ends     | [E] int32 or None            | grouped GEMM: rows past ends[-1] are left unwritten        |

The grid is (experts, N tiles, K splits); a dense GEMM of more than M_TILE_ROWS rows (a prefill) puts its M tiles on
the first axis instead, with no K split. Under w8a16 a dense GEMM of more than PREFILL_DEQUANT_ROWS rows does not run
this kernel: its weight is dequantized to x's dtype on the GPU (fp8_dequant.py, the loader's values) for F.linear,
the dequantized path's own GEMM. K splits (decode with few N tiles) write fp32 partials; the
last program of each N tile to finish (an atomic count per tile, reset by that program) sums them in
split order, `Tiles.red` partials a load, and writes the output, so one launch does it and results are
deterministic. `Tiles.swap` puts the weight rows on the MMA's M side (y^T = W x^T), which decode's few
tokens cannot fill. The setting per (N, K, rows) is `choose_tiles` (TABLE, from the H200 sweep of
`benchmarks/fp8_gemm.py --sweep`), said once at load by quant.fp8_compute's note. Graph-safe: no host
syncs, buffers sized by the shapes only. On the CPU (Triton's interpreter, tests only) rows quantized
outside the kernel use torch: the interpreter's own e4m3 cast rounds differently.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch import Tensor
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from dcpctl.runtime.models.fp8_dequant import DequantLinear, dequantize_gpu
from dcpctl.runtime.models.fp8_gemv import GemvTiles, fp8_gemv
from dcpctl.runtime.models.fp8_parts import (MODES, _counters, _split, _store_tile,  # noqa: F401
                                             _sum_partials, activation_mode, prepare, quantize_rows,
                                             quantize_rows_gpu)



@triton.jit
def _dot(a, b):
    # a 16-bit MMA, or fp32 products in full precision (not TF32) for a 32-bit model
    if a.dtype == tl.float32:
        return tl.dot(a, b, input_precision="ieee")
    return tl.dot(a, b)


@triton.jit
def _dot_acc(a, b, acc):
    # _dot accumulating into acc (the MMA chain Triton pipelines: the next K block's loads and conversion overlap it)
    if a.dtype == tl.float32:
        return tl.dot(a, b, acc, input_precision="ieee")
    return tl.dot(a, b, acc)


@triton.jit
def _fp16_rows(x):
    # x: [BM, BK] bf16 -> (x * 2^-e_r in fp16, 2^e_r fp32 per row): each row's K block scaled by a power of two so
    # that its largest |x| lands in [2^8, 2^9), exact (bf16's 8 significant bits fit fp16's 11; only entries under
    # 2^-22 of the row's largest lose bits, in fp16's subnormals). Exponents from the bits: exact powers of two.
    xf = x.to(tl.float32)
    e = (tl.max(tl.abs(xf), axis=1).to(tl.int32, bitcast=True) >> 23) & 0xFF    # biased exponent of the amax
    e = tl.minimum(tl.maximum(e, 9), 254)                                       # zero rows, and no Inf scales
    inv = ((262 - e) << 23).to(tl.float32, bitcast=True)                       # 2^(135 - e)
    back = ((e - 8) << 23).to(tl.float32, bitcast=True)                        # 2^(e - 135)
    return (xf * inv[:, None]).to(tl.float16), back


@triton.jit
def _fp8_gemm_kernel(x_ptr, xs_ptr, w_ptr, ws_ptr, ends_ptr, out_ptr, part_ptr, count_ptr,
                     R, N, K, nkb, kb_per_split, splits, sx, m_rows,
                     sw_e, sw_n, sws_e, sws_n,
                     B0: tl.constexpr, BK: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                     GROUPED: tl.constexpr, SPLIT: tl.constexpr, QUANT: tl.constexpr, SWAP: tl.constexpr,
                     RED: tl.constexpr, PDL: tl.constexpr, A16: tl.constexpr, F16: tl.constexpr,
                     FOLD: tl.constexpr):
    # x8: [R, K] e4m3 contiguous, xs: [R, nkb] fp32 (QUANT: x [R, K] 16/32-bit, row stride sx, quantized
    # here; A16: x itself, each weight tile converted to x's dtype) -> out [R, N]; with SPLIT, part [splits, R, N]
    # fp32.  SWAP computes the [BN, BM] transpose
    # axis 0: the expert (grouped) or the M tile of m_rows rows (dense; one tile of all R rows at decode sizes)
    if GROUPED:
        e = tl.program_id(0)
    else:
        e = tl.program_id(0) * 0
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    n = pid_n * BN + tl.arange(0, BN)
    n_ok = n < N
    kb0 = pid_k * kb_per_split
    kb1 = tl.minimum(kb0 + kb_per_split, nkb)
    kk = tl.arange(0, BK)
    w_base = w_ptr + e.to(tl.int64) * sw_e + n[:, None].to(tl.int64) * sw_n
    ws_base = ws_ptr + e * sws_e + (n // B0) * sws_n
    if PDL:   # launched before the previous kernel ends: pull this program's weight slab (which no kernel
        # writes) into L2 meanwhile, then wait for it before anything it writes (x, counts, partials)
        w_rows = tl.where(n_ok, w_ptr + e.to(tl.int64) * sw_e + n.to(tl.int64) * sw_n, w_ptr)
        for kb in range(kb0, kb1):   # one 128-byte line per weight row and K block of 128
            tl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [w_rows + kb * BK],
                                      dtype=tl.int32, is_pure=False, pack=1)
        gdc_wait()
        gdc_launch_dependents()
    if GROUPED:   # after the PDL wait: the group ends come from the kernel before
        row1 = tl.load(ends_ptr + e)
        row0 = tl.load(ends_ptr + e - 1, mask=e > 0, other=0)
    else:
        row0 = tl.program_id(0) * m_rows
        row1 = tl.minimum(row0 + m_rows, R)
    for m0 in range(row0, row1, BM):
        rows = m0 + tl.arange(0, BM)
        r_ok = rows < row1
        if SWAP:
            acc = tl.zeros((BN, BM), dtype=tl.float32)
        else:
            acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kb in range(kb0, kb1):
            k = kb * BK + kk
            k_ok = k < K
            x_ok = r_ok[:, None] & k_ok[None, :]
            w = tl.load(w_base + k[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0)
            ws = tl.load(ws_base + kb, mask=n_ok, other=0.0)
            if A16 and FOLD:   # w8a16, the factor folded into the tile: e4m3 x factor in fp32, rounded to x's
                # dtype (the dequantized checkpoint's weight, bit for bit), so the MMA accumulates the K blocks
                xa = tl.load(x_ptr + rows[:, None].to(tl.int64) * sx + k[None, :], mask=x_ok, other=0.0)
                wa = (w.to(tl.float32) * ws[:, None]).to(xa.dtype)
                if SWAP:
                    acc = _dot_acc(wa, tl.trans(xa), acc)
                else:
                    acc = _dot_acc(xa, tl.trans(wa), acc)
            elif A16:     # w8a16: the e4m3 tile in x's dtype (exact), a 16-bit MMA, the weight block's factor
                xa = tl.load(x_ptr + rows[:, None].to(tl.int64) * sx + k[None, :], mask=x_ok, other=0.0)
                if F16:   # bf16 rows through an fp16 MMA (see _fp16_rows): e4m3 -> fp16 is one conversion a pair
                    xa, xe = _fp16_rows(xa)
                wa = w.to(xa.dtype)
                if SWAP:
                    d = _dot(wa, tl.trans(xa)) * ws[:, None]
                    if F16:   # the rows' powers of two back
                        d = d * xe[None, :]
                else:
                    d = _dot(xa, tl.trans(wa))
                    if F16:
                        d = d * xe[:, None]
                    d = d * ws[None, :]
                acc += d
            else:
                if QUANT:   # the K block is one scale group (BK == b1): s = amax / 448 per row, as quantize_rows
                    xf = tl.load(x_ptr + rows[:, None].to(tl.int64) * sx + k[None, :], mask=x_ok, other=0.0)
                    xf = xf.to(tl.float32)
                    s = tl.maximum(tl.max(tl.abs(xf), axis=1), 1e-10) / 448.0
                    x8 = (xf / s[:, None]).to(tl.float8e4nv)
                else:
                    x8 = tl.load(x_ptr + rows[:, None].to(tl.int64) * K + k[None, :], mask=x_ok, other=0.0)
                    s = tl.load(xs_ptr + rows * nkb + kb, mask=r_ok, other=0.0)
                if SWAP:
                    acc += tl.dot(w, tl.trans(x8)) * ws[:, None] * s[None, :]
                else:
                    acc += tl.dot(x8, tl.trans(w)) * s[:, None] * ws[None, :]
        if SWAP:
            at = rows[None, :].to(tl.int64) * N + n[:, None]
            ok = n_ok[:, None] & r_ok[None, :]
        else:
            at = rows[:, None].to(tl.int64) * N + n[None, :]
            ok = r_ok[:, None] & n_ok[None, :]
        _store_tile(out_ptr, part_ptr, pid_k, R, N, at, acc, ok, SPLIT)
    if SPLIT:
        _sum_partials(part_ptr, out_ptr, count_ptr, pid_n, R, N, n, n_ok, splits, BM, BN, RED)


@dataclass(frozen=True)
class Tiles:
    bn: int = 64          # N columns per program (<= the weight block rows keeps one scale per K block)
    warps: int = 4
    stages: int = 3       # software pipeline depth of the K loop
    per_sm: int = 2       # dense GEMMs: K splits until about this many programs run per SM
    fuse_rows: int = 0    # quantize the activations inside the GEMM (one launch) when R <= this
    swap: bool = False    # compute W x^T (N on the MMA's M side: few tokens fill the small side)
    red: int = 1          # K-split partials summed per load by the tile's last program (a power of two;
                          # capped so that red x BM x BN <= 8192 fp32 stay in registers)
    pdl: bool = False     # programmatic dependent launch (sm_90+): prefetch the weight while the previous
                          # kernel finishes
    max_split: int = 0    # at most this many K splits (0: per_sm decides alone): the tile's last program reads
                          # splits x R x BN fp32 partials by itself, which at R = 64 outweighs a small weight
    fold: bool = False    # w8a16: fold the weight block's factor into the converted tile (rounded to the rows'
                          # dtype: the dequantized weight) so that the MMA accumulates across K blocks instead of
                          # a scaled add after each one; no effect under w8a8
    bm: int = 0           # rows per MMA tile (16, 32, 64 or 128; 0: by the row count, 16 / 32 / 64); above
                          # M_TILE_ROWS (prefill) also the rows of one program



# w8a16's MMA for bf16 rows (the MMA kernel; fp16 and fp32 rows keep their own; the few-rows kernel has no MMA, so
# a16_mma does not apply to it). "bf16" converts each e4m3 weight tile to bf16: Triton on sm_90 emits e4m3x2 ->
# f16x2 and then one scalar cvt.bf16.f16 per weight element. "fp16" converts it to fp16 (one instruction a pair)
# and scales each row's K block by a power of two into fp16 (_fp16_rows: exact, the same products; on an H200 a
# tiny FP8 model's logits were bit-equal under the two, and every kernel shape tried had the same error), which
# costs a conversion of the rows per tile instead. "auto" takes fp16 for dense tiles of 16 rows and grouped GEMMs of
# 16 rows or more (two tokens of a top-8 MoE) in tiles of 16, bf16 otherwise. Measured on an H200, one run
# (benchmarks/fp8_gemm.py --modes w8a16f w8a16 ...: h200_fp8_gemm_a16_s11.json, whose `w8a16` is the bf16 MMA;
# us, bf16 -> fp16 MMA, same tiles): o_proj 55.8 -> 46.9 at 8 rows, q_b_proj 18.1 -> 15.6, the grouped experts'
# gate+up 547 -> 527 at 8 tokens; but the grouped gate+up at one token (8 rows) 102 -> 111, and at 64 rows o_proj
# 137 -> 181 and the TP-8 dense gate+up 53 -> 92 (at 32 rows mixed: -16% to +30%)
A16_MMAS = ("auto", "fp16", "bf16")
A16_MMA = "auto"


def fp16_mma(a16_mma: str, bm: int, grouped: bool, rows: int) -> bool:
    """Whether w8a16 takes the fp16 MMA for bf16 rows in tiles of bm rows (rows: the GEMM's, all groups')."""
    return a16_mma == "fp16" or (a16_mma == "auto" and bm == 16 and (not grouped or rows >= 16))


Kernel = Tiles | GemvTiles | DequantLinear
# Above this many rows a dense GEMM's rows are tiled over programs (grid axis 0), as a prefill needs: one program per
# (M tile, N tile). Before the fifteenth session every program looped over all the rows, so a 1024-row GEMM ran
# on the N tiles' programs alone (o_proj: 112 of them) and took 5.7x cuBLAS bf16's time (1773 against 311 us;
# benchmarks/data/h200_fp8_fold_prefill_s14.json)
M_TILE_ROWS = 64
BEFORE_TILES = Tiles()   # the kernel as first shipped: a quantization launch, one partial a load
# Measured on an H200 (benchmarks/fp8_gemm.py --sweep, TABLE_SOURCE), against BEFORE_TILES in the same run:
# fusing the quantization into the K loop puts an absmax, a division and a shared-memory store on every
# iteration's critical path (q_b_proj at M = 1, no K splits: 14.5 -> 16.9 us), and summing 8 partials a
# load costs registers the whole kernel pays for (q_a_proj at M = 32, not fused: 12.8 -> 21.3 us), so
# neither is the default.
DEFAULT_TILES = BEFORE_TILES
# (N, K) -> ((most rows, Tiles), ...): a setting kept only where the sweep beat the shipped one by more than
# 10% in the same run (repeat runs of one setting differ by up to 5%); the first bound covering R wins, beyond the
# last DEFAULT_TILES.  The 32- and 64-row settings come from the ninth session's sweep at M = 32 and 64 (before ->
# after in us on an H200, TABLE_SOURCE's second file; fewer rows were not swept there and keep BEFORE_TILES).
TABLE: dict[tuple[int, int], tuple[tuple[int, Tiles], ...]] = {
    (576, 7168): ((16, BEFORE_TILES), (32, Tiles(bn=32, stages=4)),             # kv_a_proj: 11.5 -> 10.2
                  (64, Tiles(bn=32, stages=4, per_sm=1))),                       # 18.6 -> 11.8
    (24576, 1536): ((8, BEFORE_TILES), (32, Tiles(swap=True))),                 # q_b_proj: 18.8 -> 14.6 at 32
    (7168, 16384): ((16, BEFORE_TILES), (32, Tiles(per_sm=4, swap=True, max_split=4)),   # o_proj: 50.9 -> 41.5
                    (64, Tiles(stages=5, per_sm=1))),                           # 68.2 -> 50.4
    (4608, 7168): ((16, BEFORE_TILES), (32, Tiles(per_sm=4, swap=True, max_split=4)),    # TP-8 dense gate+up:
                   (64, Tiles(bn=32, stages=4))),                               # 21.1 -> 18.1, 27.1 -> 22.7
    (4096, 7168): ((16, BEFORE_TILES), (32, Tiles(per_sm=4, swap=True)),        # shared expert gate+up:
                   (64, Tiles(bn=32, stages=4))),                               # 18.2 -> 16.5, 24.6 -> 19.1
    (7168, 2048): ((32, BEFORE_TILES), (64, Tiles(bn=32, stages=4, per_sm=1))),  # TP-8 o_proj, shared down:
}                                                                                # 16.1 -> 11.5 at 64
TABLE_SOURCE = "benchmarks/data/h200_fp8_gemm_m64_splits.json (q_b_proj's first 8 rows: h200_fp8_gemm_variants.json)"
# w8a16's own settings where TABLE's (swept under w8a8) lose, by more than 10% in one run: at 8 rows the eleventh
# session's H200 sweep of w8a16 through the fp16 MMA (h200_fp8_gemm_a16_s11.json), and BEFORE_TILES where the twelfth
# session's run of the shipped choices found it more than 10% faster (s12). At 17-64 rows the fourteenth session's
# sweep of folded settings (Tiles.fold; h200_fp8_fold_sweep_s14.json, one run, us shipped -> this one, cuBLAS bf16
# in brackets): the unfolded K loop waited for each K block's MMA to scale and add it, and lost to bf16 everywhere
# from 32 rows. Folded, each weight is the dequantized checkpoint's bf16 value (e4m3 x factor rounded to the rows'
# dtype), as the bf16 path computes it. The sweep's kv_a_proj win at 8 rows (8.3 -> 6.7 us) was an early-launch
# (pdl) setting, whose gain in this benchmark is an upper bound (the CANDIDATES note in benchmarks/fp8_gemm.py), so it
# is not taken
_F = Tiles(fold=True)   # BEFORE_TILES folded
TABLE_A16: dict[tuple[int, int], tuple[tuple[int, Tiles], ...]] = {
    (7168, 16384): ((8, Tiles(bn=128, per_sm=4, max_split=4)), *TABLE[(7168, 16384)][:1],     # o_proj: 46.9 -> 40.1
                    (32, Tiles(stages=5, per_sm=1, swap=True, fold=True)),                    # 66.5 -> 54.0 (61.2)
                    (64, Tiles(bn=128, per_sm=4, max_split=4, fold=True))),                   # 116.5 -> 63.1 (61.6)
    (4096, 7168): ((8, Tiles(bn=128, per_sm=4, max_split=8)), *TABLE[(4096, 7168)][:1],   # shared expert gate+up:
                   (32, Tiles(per_sm=4, swap=True, max_split=4, fold=True)),                 # 16.1 -> 14.5 at 8;
                   (64, Tiles(bn=128, warps=8, per_sm=4, swap=True, max_split=4, fold=True))),   # 21.0 -> 16.7 (19.1),
                                                                                             # 35.0 -> 20.7 (17.8)
    (4608, 7168): ((32, BEFORE_TILES),                    # TP-8 dense gate+up: 29.2 -> 26.4 at 32 rows (s11; folded
                   (64, Tiles(bn=128, per_sm=4, max_split=4, fold=True))),   # 24.0, under 10%), 40.8 -> 32.9 (22.8)
    (24576, 1536): ((16, BEFORE_TILES), (32, _F),                     # q_b_proj at 16 rows: 21.56 -> 15.29 (s12);
                    (64, Tiles(stages=4, per_sm=1, swap=True, fold=True))),   # 26.2 -> 19.4 (20.9), 36.6 -> 29.4 (21.8)
    (2112, 7168): ((32, Tiles(swap=True, fold=True)),     # q_a + kv_a joined (the qkv_a fusion): 13.5 -> 11.8 (12.8)
                   (64, Tiles(per_sm=4, swap=True, max_split=4, fold=True))),   # 17.4 -> 14.6 (13.6)
}
# w8a16's dense GEMMs of M_TILE_ROWS + 1 to PREFILL_DEQUANT_ROWS rows (the rows tiled over programs): folded, in
# 128-row MMA tiles of 64 columns, two warpgroups. In the fifteenth session's H200 sweep at 96 and 128 rows
# (h200_fp8_prefill_dense_s15.json, 9 folded settings and DequantLinear on 6 shapes) it was within 6% of the best
# setting on every shape, and 1.1-1.75x faster than Tiles(fold=True) (o_proj at 96 rows 151.0 -> 136.3 us, q_a+kv_a
# 43.7 -> 25.2; cuBLAS bf16 67.8 and 13.9)
PREFILL_A16_TILES = Tiles(bm=128, bn=64, warps=8, fold=True)
# ... and above PREFILL_DEQUANT_ROWS rows the weight dequantized to the rows' dtype, then cuBLAS (fp8_dequant.py): the
# dequantized path's own GEMM, bit for bit. At 1024 rows the best FP8 setting of the same session's first sweep took
# 2.3-3.2x cuBLAS bf16's time (o_proj 814 against 355 us; h200_fp8_prefill_s15.json); dequantized, 1.1-1.4x (468
# against 362; at 4096 rows 0.91-1.16x; at 96-128 rows the MMA kernel above is the faster on half the shapes)
DEQUANT = DequantLinear()
PREFILL_DEQUANT_ROWS = 128
# w8a16's grouped GEMMs whose experts average more than M_TILE_ROWS rows (a prefill's routed experts): folded, in
# 128 x 128 MMA tiles, two warpgroups. Fifteenth session, H200 (benchmarks/fp8_gemm.py --grouped --experts 16
# --batches 512 --a16-candidates, h200_fp8_prefill_grouped16_s15.json; 16 experts of 256 rows): gate+up 1517 -> 1077
# us, down 773 -> 549 against DEFAULT_TILES (torch._grouped_mm on bf16 experts 551 and 299)
PREFILL_GROUPED_A16_TILES = Tiles(bm=128, bn=128, warps=8, fold=True)
TABLE_A16_SOURCE = ("benchmarks/data/h200_fp8_gemm_a16_s11.json, h200_fp8_gemm_modes_s11.json; the twelfth session's "
                    "run of the shipped choices, h200_fp8_gemm_s12.json (s12 above); folded at 17-64 rows: "
                    "h200_fp8_fold_sweep_s14.json")


# The few-rows kernel (fp8_gemv.py) for dense GEMMs of up to GEMV_ROWS rows, the MMA kernel otherwise. Measured on
# an H200 (benchmarks/fp8_gemm.py --sweep, GEMV_SOURCE): at one row the unpipelined setting below beat the MMA
# kernel on 7 of 8 DeepSeek-V3 shapes (o_proj 38.2 -> 34.9 us, kv_a_proj 8.2 -> 5.9 us) and every pipelined one
# (cp.async slabs: o_proj 63.6 us); at 8 rows the kernel's first setting took 5-13x the MMA kernel's time, so one
# row is the bound until more is measured. Grouped GEMMs stayed on the MMA kernel (its decode expert GEMMs ran at
# 1.07-1.11x their weight-read roofline for 8-64 tokens, the few-rows kernel's first setting 1.8x slower at one)
# until the eleventh session measured the shipped few-rows setting faster at 1-8 tokens under w8a16 (below).
GEMV_ROWS = 1
# w8a16's grouped GEMMs (a decode step's routed experts, 256 of them, top-8) take the few-rows kernel up to this many
# rows in all: on an H200 it beat the MMA kernel at 1 and 8 tokens in both runs of the eleventh session
# (h200_fp8_gemm_modes_s11.json, h200_fp8_gemm_a16_s11.json; us, MMA -> few-rows): gate+up 101.9 -> 68.8 and
# 110.8 -> 69.4 at one token (8 rows), 544.7 -> 488.4 and 527.3 -> 510.8 at 8 tokens; down 60.6 -> 37.1 and 61.8 ->
# 36.4, 278.8 -> 246.0 and 276.3 -> 261.1; at 32 tokens it lost (1561 -> 2121). w8a8's grouped GEMMs were not timed
# on it there and stay on the MMA kernel
GROUPED_GEMV_ROWS = 64
DEFAULT_GEMV = GemvTiles(kb=4, per_sm=16, stages=1)
# (N, K) -> its own few-rows setting, or None where the MMA kernel was faster at one row
GEMV_TABLE: dict[tuple[int, int], GemvTiles | None] = {
    (24576, 1536): None,   # q_b_proj: 14.34 us MMA vs 15.35 us
}
GEMV_SOURCE = "benchmarks/data/h200_fp8_gemv.json"


def choose_tiles(N: int, K: int, rows: int, experts: int = 1, a16: bool = False,
                 total_rows: int | None = None) -> Kernel:
    """The kernel and tile setting for this shape and row count (per expert when grouped; total_rows: all the
    grouped GEMM's rows): the few-rows kernel for dense GEMMs up to GEMV_ROWS (GEMV_TABLE, else DEFAULT_GEMV) and
    for w8a16's grouped GEMMs up to GROUPED_GEMV_ROWS rows in all (DEFAULT_GEMV), else the measured TABLE (dense;
    w8a16: TABLE_A16 where it has the shape, PREFILL_A16_TILES above M_TILE_ROWS rows and DEQUANT above
    PREFILL_DEQUANT_ROWS; grouped w8a16 above M_TILE_ROWS rows per expert PREFILL_GROUPED_A16_TILES), else
    DEFAULT_TILES."""
    gemv = GEMV_TABLE.get((N, K), DEFAULT_GEMV)
    if experts == 1 and rows <= GEMV_ROWS and gemv is not None:
        return gemv
    if experts > 1 and a16 and total_rows is not None and total_rows <= GROUPED_GEMV_ROWS:
        return DEFAULT_GEMV
    if experts == 1 and a16 and rows > PREFILL_DEQUANT_ROWS:
        return DEQUANT
    if experts == 1 and a16 and rows > M_TILE_ROWS:
        return PREFILL_A16_TILES
    if experts > 1 and a16 and rows > M_TILE_ROWS:
        return PREFILL_GROUPED_A16_TILES
    table = TABLE_A16 if a16 and (N, K) in TABLE_A16 else TABLE
    for most, t in table.get((N, K), ()) if experts == 1 else ():
        if rows <= most:
            return t
    return DEFAULT_TILES


def tiles_note() -> str:
    return (f"FP8 GEMM kernels: dense GEMMs of up to {GEMV_ROWS} row(s) the weight-streaming kernel {DEFAULT_GEMV} "
            f"(but {sum(v is None for v in GEMV_TABLE.values())} shape(s) measured faster on the MMA kernel; "
            f"{GEMV_SOURCE}), otherwise the MMA kernel (dense GEMMs of {len(TABLE)} DeepSeek-V3 shape(s) from the "
            f"H200 sweep in {TABLE_SOURCE}; w8a16: {len(TABLE_A16)} of them from {TABLE_A16_SOURCE}; others and the "
            f"grouped MoE GEMMs {DEFAULT_TILES}, but w8a16's grouped GEMMs of up to {GROUPED_GEMV_ROWS} rows the "
            f"weight-streaming kernel, its dense GEMMs of {M_TILE_ROWS + 1}-{PREFILL_DEQUANT_ROWS} rows "
            f"{PREFILL_A16_TILES} and of more the weight dequantized to the rows' dtype for cuBLAS, its grouped GEMMs of "
            f"more than {M_TILE_ROWS} rows per expert {PREFILL_GROUPED_A16_TILES}; above {M_TILE_ROWS} rows a dense "
            f"GEMM's rows are tiled over programs)")


def fp8_matmul(x: Tensor, w8: Tensor, scale: Tensor, block: tuple[int, int], ends: Tensor | None = None,
               sms: int | None = None, tiles: Kernel | None = None, mode: str | None = None,
               a16_mma: str | None = None) -> Tensor:
    """x @ W^T for a block-FP8 W (see the module docstring); `ends` makes it a grouped GEMM; mode 'w8a16' or
    'w8a8' (None: activation_mode(), chosen at load); a16_mma: w8a16's MMA for bf16 rows (A16_MMAS; None:
    A16_MMA, auto)."""
    mode = mode or activation_mode()
    if mode not in MODES:
        raise ValueError(f"FP8 GEMM method {mode!r}; valid: {', '.join(MODES)}")
    a16 = mode == "w8a16"
    a16_mma = a16_mma or A16_MMA
    if a16_mma not in A16_MMAS:
        raise ValueError(f"w8a16 MMA {a16_mma!r}; valid: {', '.join(A16_MMAS)}")
    b0, b1 = block
    grouped = ends is not None
    w3 = w8 if grouped else w8.unsqueeze(0)
    s3 = scale if grouped else scale.unsqueeze(0)
    E, N, K = w3.shape
    R = x.shape[0]
    nkb = -(-K // b1)
    t = tiles or choose_tiles(N, K, max(1, R // E), E, a16, R)
    if sms is None:   # the GPU's own count (the memoized probe); the CPU interpreter has no SMs to fill
        from dcpctl.runtime.attention.kernel_choice import gpu_facts
        sms = gpu_facts(x.device).sms if x.is_cuda else 1
    if isinstance(t, GemvTiles):
        return fp8_gemv(x, w3, s3, block, ends, sms, t, a16)
    if isinstance(t, DequantLinear):
        if grouped or not a16:
            raise ValueError("DequantLinear runs w8a16's dense GEMMs only")
        return F.linear(x, dequantize_gpu(w3[0], s3[0], block, x.dtype, t))
    rows = R if E == 1 else max(1, R // E)
    bm = t.bm or (16 if rows <= 16 else 32 if rows <= 32 else 64)
    # dense GEMMs of more than M_TILE_ROWS rows (prefill) spread their rows over programs, bm a program, with no K
    # split; up to it (decode) every program takes all the rows
    m_tiles = triton.cdiv(R, bm) if not grouped and R > M_TILE_ROWS else 1
    splits = 1 if m_tiles > 1 else _split(nkb, E * triton.cdiv(N, t.bn), sms, t.per_sm, E, t.max_split)
    per = -(-nkb // splits)
    x = x.contiguous()
    fuse = not a16 and R <= t.fuse_rows
    if fuse or a16:
        xq, xs = x, x   # xs unused
    else:
        xq, xs = quantize_rows_gpu(x, b1) if x.is_cuda else quantize_rows(x, b1)
    out = (torch.zeros if grouped else torch.empty)((R, N), dtype=x.dtype, device=x.device)  # grouped: rows
    part = torch.empty((splits, R, N), dtype=torch.float32, device=x.device) if splits > 1 else out  # past ends: 0
    ends_arg = ends if grouped else torch.empty(1, dtype=torch.int32, device=x.device)
    n_tiles = triton.cdiv(N, t.bn)
    _fp8_gemm_kernel[(E if grouped else m_tiles, n_tiles, splits)](
                                           xq, xs, w3, s3, ends_arg, out, part, _counters(x.device, n_tiles),
                                           R, N, K, nkb, per, splits, x.stride(0), bm if m_tiles > 1 else max(R, 1),
                                           w3.stride(0), w3.stride(1), s3.stride(0), s3.stride(1),
                                           B0=b0, BK=b1, BM=bm, BN=t.bn, GROUPED=grouped, SPLIT=splits > 1,
                                           QUANT=fuse, SWAP=t.swap, RED=min(t.red, max(1, 8192 // (bm * t.bn))),
                                           PDL=t.pdl and x.is_cuda, A16=a16,
                                           F16=a16 and not t.fold and x.dtype == torch.bfloat16
                                           and fp16_mma(a16_mma, bm, grouped, R), FOLD=a16 and t.fold,
                                           num_warps=t.warps, num_stages=t.stages,
                                           launch_pdl=t.pdl and x.is_cuda)
    return out
