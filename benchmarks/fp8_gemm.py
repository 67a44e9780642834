"""Block-FP8 GEMM vs the bf16 GEMM of the same shape at decode batch sizes, against the weight-read roofline.

    python -m benchmarks.fp8_gemm [--json OUT] [--hbm-tbps 4.2] [--sweep] [--sweep-m 1 8] [--budget-s 150]
                                   [--table] [--grouped [--experts 256] [--grouped-rows 2 4 ...]]
                                   [--merge-table FILE]

Shapes: DeepSeek-V3's projections (TP 1 and TP 8 slices; a routed expert's down projection has o_proj/tp8's
shape), q_a_proj and kv_a_proj joined (they share their input: 2112 x 7168, its last scale block 64 rows), and
the gate and up projections of the TP-8 dense MLP and of one routed expert concatenated (how the runtime holds
them). --grouped adds the MoE as a decode step runs it: 256 experts, M tokens routed top-8 (distinct random
experts per token, a new routing every call), the gate+up and down grouped GEMMs over the M x 8 rows sorted by
expert, against torch._grouped_mm on bf16 experts; its roofline reads the weights of the experts that have
rows; --grouped-rows times it at those rows per expert (M = rows x experts / 8 tokens) instead of --batches,
and with --sweep also every GROUPED_DECODE setting there (up to fp8_gemm.M_TILE_ROWS rows per expert): the
table's "grouped_w8a16" section (first --modes method w8a16) or "grouped" (w8a8) keeps, per shape and rows per
expert, the best MMA setting where it beats DEFAULT_TILES by GROUPED_MARGIN (5%), else DEFAULT_TILES
(fp8_tiles.py reads it; the bf16 torch._grouped_mm of the same rows is the reference each row reports). Each
timing is a CUDA graph of 20 back-to-back calls that rotate over enough weight copies (> 2x the 50 MB L2) that
every call reads its weight from HBM; the graph is replayed 20 times and the median per call is reported, so
launch latency is amortized the way a captured decode step sees it (kernel after kernel, no host in between).
Roofline: (weight bytes + scale bytes + activation and output bytes) / HBM bandwidth. Every cell times, in the
same process and under the first --modes method (default w8a16): `before` (fp8_gemm.BEFORE_TILES: the MMA
kernel as first shipped; under w8a8 with a quantization launch), `gemv` (up to 16 rows: the few-rows kernel of
fp8_gemv.py at the tuning table's setting, else DEFAULT_GEMV), `after` (the shipped choice,
fp8_gemm.choose_tiles) and cuBLAS bf16; further --modes methods time `after` under them too
(`after_<mode>_us`; w8a16f / w8a16b: w8a16 through fp8_gemm's fp16 / bf16 MMA for bf16 rows, `a16_mma`).
--read-floor adds a read-only kernel's time over the same FP8 and bf16 weight bytes (read_floor.py) and an
empty kernel's. --sweep also times every GEMV_CANDIDATES setting (M <= 16) and CANDIDATES one (M > 1) at the
--sweep-m batch sizes and reports the best (--a16-candidates: the A16_CANDIDATES settings instead); `--table`
prints the tuning table (--save-table FILE writes it) those bests make; --merge-table FILE keeps the sections
of that fp8_gemm table which this run did not write. --torch-peer also times torch's own blockwise scaled_mm
(cuBLAS 1x128 x 128x128 scales, the activation quantization launch included) where this build takes it: the
scale layouts are tried in turn until one's output matches ours (norm-relative < 1e-2), which is then timed
and kept for the later cells; each refusal is recorded (`torch_peer` in the JSON). Errors (M = 8, one cell per
shape): each kernel (MMA and few-rows) under w8a8 against float64 math on the same quantized operands, the
1x128 e4m3 activation quantization itself (float64, quantized vs not), each kernel under w8a16 against the
exact float64 product and against bf16 F.linear, and bf16 F.linear on the dequantized weight against float64.
"""
from __future__ import annotations

import argparse
import functools
import itertools
import json
import statistics
import sys
import time
from dataclasses import replace

import torch
import torch.nn.functional as F

from dcpctl.runtime.kernels.fp8_tiles import GEMV_ROWS, current as current_tables
from dcpctl.runtime.kernels.fp8_gemm import (BEFORE_TILES, DEFAULT_GEMV, DEFAULT_TILES, DEQUANT,
                                             M_TILE_ROWS, DequantLinear, GemvTiles, Tiles, choose_tiles,
                                             fp8_matmul, quantize_rows)
from dcpctl.runtime.kernels.fp8_parts import MODES, quantize_rows_gpu

SHAPES = {  # name: (N, K); a routed expert's down projection is o_proj/tp8's shape (7168 x 2048); dense_*:
    # V3's dense MLP at TP 1 (fp8_serve.py's checkpoint, layer 0)
    "q_a_proj": (1536, 7168), "kv_a_proj": (576, 7168), "q_a+kv_a_proj": (2112, 7168), "q_b_proj": (24576,
                                                                                                    1536),
    "o_proj": (7168, 16384), "o_proj/tp8": (7168, 2048), "dense_gate_up/tp8": (4608, 7168),
    "expert_gate_up": (4096, 7168), "dense_gate_up": (36864, 7168), "dense_down": (7168, 18432),
}
GROUPED = {"experts_gate_up": (4096, 7168), "experts_down": (7168, 2048)}   # --grouped: 256 experts, top-8
BATCHES = (1, 8, 16, 64)
GEMV_MAX_M = 16   # the few-rows kernel is timed up to here
METHODS = (*MODES, "w8a16f", "w8a16b")   # w8a16 through fp8_gemm's fp16 / bf16 MMA for bf16 rows (A16_MMAS;
# plain w8a16: the shipped choice, auto)
MODE = ["w8a16"]        # --modes: the method every timing uses, then (optional) a second one for the shipped
                        # setting
FLOOR_DONE: dict = {}   # --read-floor: (N, K) -> the M whose row has the shape's read floor
EXTRA: dict = {}        # run-wide figures for the JSON (the methods, the empty kernel's time)
CALLS, REPLAYS = 20, 20
L2_BYTES = 50 * 2**20
# N tiles of 32 (SGLang's H200 table for N=576, K=7168), 64 and 128, with 1-4 programs per SM from K splits;
# the swapped MMA only where the weight rows fill its M side (>= 64); the quantization fused into the GEMM
# with the swapped MMA (the one pairing that won in the first H200 sweep); early launch (pdl) for a few. In
# this benchmark a pdl GEMM follows another GEMM that lets it start early; in a decode step the kernel
# before is often a torch one, which does not, so pdl gains here are an upper bound
CANDIDATES = ([Tiles(32, 4, 4, ps) for ps in (1, 2, 4)]
              + [Tiles(64, 4, 3, ps, swap=sw) for ps in (1, 2, 4) for sw in (False, True)]
              + [Tiles(128, 4, 4, ps, swap=sw) for ps in (1, 2) for sw in (False, True)]
              + [Tiles(64, 4, 3, ps, fuse_rows=64, swap=True) for ps in (1, 2)]
              + [Tiles(64, 4, 3, ps, swap=sw, pdl=True) for ps, sw in ((1, False), (2, False), (2, True))]
              + [Tiles(stages=5, per_sm=1)]
              # capped K splits (the tile's last program sums splits x M x BN fp32 partials alone)
              + [Tiles(bn, 4, 3, 4, max_split=ms) for bn in (32, 64, 128) for ms in (2, 4, 8)]
              + [Tiles(64, 4, 3, 4, swap=True, max_split=ms) for ms in (4, 8)])
# --a16-candidates (w8a16's MMA kernel at 8-64 rows, where it loses to cuBLAS bf16 from 32 rows): the weight
# factor folded into the converted tile (Tiles.fold: one MMA chain over the K blocks, no wait and scaled add
# per block) with the settings that won this session's first w8a16 sweep at 32-64 rows unfolded (two
# warpgroups, which that sweep also tried, won no cell), and those unfolded settings again
A16_WON = [Tiles(64, 4, 3, 4, swap=True, max_split=4), Tiles(64, 4, 4, 1, swap=True), Tiles(swap=True),
           BEFORE_TILES, Tiles(bn=32, stages=4, per_sm=1), Tiles(128, 8, 3, 4, swap=True, max_split=4)]
# ... and for the widest weights (V3's dense MLP at TP 1, 36864 x 7168 and 7168 x 18432: the first sweep's
# best at 32-64 rows were 128-column tiles, capped K splits, one or two warpgroups) more of those
A16_WIDE = [Tiles(128, 8, 4, 4, swap=True, max_split=4, fold=True), Tiles(128, 8, 3, 2, swap=True, fold=True),
            Tiles(128, 8, 3, 4, swap=True, max_split=2, fold=True),
            Tiles(128, 8, 3, 4, swap=True, max_split=8, fold=True),
            Tiles(128, 4, 3, 4, swap=True, max_split=2, fold=True), Tiles(bn=128, per_sm=4, max_split=2,
                                                                          fold=True),
            Tiles(bn=128, per_sm=2, fold=True), Tiles(bn=128, warps=8, per_sm=4, max_split=4, fold=True)]
A16_CANDIDATES = ([replace(t, fold=True) for t in A16_WON]
                  + [Tiles(64, 4, 4, 2, swap=True, fold=True), Tiles(128, 4, 3, 1, swap=True, fold=True),
                     Tiles(128, 4, 4, 4, swap=True, max_split=4, fold=True),
                     Tiles(bn=128, per_sm=4, max_split=4, fold=True),
                     Tiles(32, 4, 4, 2, fold=True), Tiles(64, 4, 5, 1, swap=True, fold=True)]
                  + A16_WON + A16_WIDE)
# --a16-candidates above fp8_gemm.M_TILE_ROWS (prefill: the rows tiled over programs): folded N tiles of 64
# and 128, one and two warpgroups, swapped or not (fold has no effect under w8a8, so with --modes w8a8 first
# the same list sweeps w8a8's prefill settings); 128-row MMA tiles (bm) halve the weight conversions per
# product
PREFILL_A16 = [Tiles(fold=True), Tiles(bn=128, fold=True), Tiles(bn=128, warps=8, fold=True),
               Tiles(bn=128, swap=True, fold=True), Tiles(bn=128, warps=8, stages=4, fold=True),
               Tiles(bm=128, fold=True), Tiles(bm=128, bn=128, warps=8, fold=True),
               Tiles(bm=128, bn=128, warps=8, stages=4, fold=True), Tiles(bm=128, bn=64, warps=8, fold=True)]
# ... and under w8a16 the weight dequantized for cuBLAS (fp8_dequant.DequantLinear; the shipped choice above
# fp8_gemm.PREFILL_DEQUANT_ROWS)
PREFILL_A16_DEQUANT = [DEQUANT]
# --a16-candidates with --grouped: the grouped MMA kernel (DEFAULT_TILES) folded, next to it unfolded
GROUPED_A16 = [Tiles(fold=True), BEFORE_TILES, Tiles(stages=4, fold=True)]
# --sweep with --grouped-rows (decode's rows per expert, up to fp8_gemm.M_TILE_ROWS): the grouped MMA kernel
# over the dense decode sweep's settings, per method (w8a16: A16_CANDIDATES and GROUPED_A16; w8a8:
# CANDIDATES), DEFAULT_TILES first (the table's reference)
GROUPED_DECODE = {"w8a16": list(dict.fromkeys([DEFAULT_TILES, *A16_CANDIDATES, *GROUPED_A16])),
                  "w8a8": list(dict.fromkeys([DEFAULT_TILES, *CANDIDATES]))}
GROUPED_MARGIN = 0.05   # a grouped table entry is kept only where it is this much faster than DEFAULT_TILES
# (a setting within it of the default is not worth a specialization more to compile)
GROUPED_SECTIONS = {"w8a16": "grouped_w8a16", "w8a8": "grouped"}   # the table section a method's sweep writes
DENSE_SECTIONS = {"w8a16": "dense_w8a16", "w8a8": "dense"}
# ... and where the experts average more than fp8_gemm.M_TILE_ROWS rows (prefill), 128-row MMA tiles too
GROUPED_PREFILL_A16 = [Tiles(bm=128, bn=128, warps=8, fold=True), Tiles(bm=128, fold=True),
                       Tiles(bm=128, bn=128, warps=8, stages=4, fold=True)]
# the few-rows kernel around the setting that won the first H200 sweep (DEFAULT_GEMV: 16 rows x 4 K blocks a
# program, 16 programs per SM, no software pipeline; pipelined slabs lost on every shape): 8-32 rows, 2-8 K
# blocks, 8-32 programs per SM, 2 or 8 warps, the quantization launched first, 2 slabs in flight
GEMV_CANDIDATES = [GemvTiles(16, 8, 4, 16, stages=1), GemvTiles(16, 4, 4, 32, stages=1),
                   GemvTiles(16, 2, 4, 16, stages=1), GemvTiles(32, 4, 4, 16, stages=1),
                   GemvTiles(8, 4, 4, 16, stages=1), GemvTiles(8, 8, 4, 32, stages=1),
                   GemvTiles(16, 4, 8, 16, stages=1), GemvTiles(16, 4, 2, 16, stages=1),
                   GemvTiles(16, 4, 4, 16, fuse=False, stages=1), GemvTiles(16, 4, 4, 16, stages=2)]


def method(m: str) -> dict:
    """fp8_matmul's keywords for a --modes method."""
    mma = {"w8a16f": "fp16", "w8a16b": "bf16"}.get(m)
    return {"mode": "w8a16", "a16_mma": mma} if mma else {"mode": m}


def _graph_time(fn, copies: int) -> float:
    # seconds per call: CALLS calls in one graph (weight copy i % copies), median of REPLAYS replays
    for i in range(3):
        fn(i % copies)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(CALLS):
            fn(i % copies)
    times = []
    for _ in range(REPLAYS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / 1e3 / CALLS)
    return statistics.median(times)


def errors(x: torch.Tensor, w8: torch.Tensor, s: torch.Tensor) -> dict:
    """Max-abs and norm errors relative to the float64 product of x and the dequantized weight, for the MMA
    kernel (DEFAULT_TILES) and the few-rows one (DEFAULT_GEMV)."""
    w = (w8.double() * s.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:w8.shape[0],
                                                                                      :w8.shape[1]])
    x8, xs = quantize_rows(x, 128)
    xq = x8.double() * xs.double().repeat_interleave(128, 1)[:, :x.shape[1]]
    exact, quant = x.double() @ w.T, xq @ w.T
    mma, gemv = (fp8_matmul(x, w8, s, (128, 128), tiles=t, mode="w8a8").double() for t in (DEFAULT_TILES,
                                                                                           DEFAULT_GEMV))
    mma16, gemv16 = (fp8_matmul(x, w8, s, (128, 128), tiles=t, mode="w8a16").double()
                     for t in (DEFAULT_TILES, DEFAULT_GEMV))
    bf16 = F.linear(x, w.to(torch.bfloat16)).double()

    def rel(a, b):
        return {"max": round(((a - b).abs().max() / b.abs().max()).item(), 5),
                "norm": round(((a - b).norm() / b.norm()).item(), 5)}
    return {"kernel_vs_same_quantized_f64": rel(mma, quant), "gemv_vs_same_quantized_f64": rel(gemv, quant),
            "activation_quantization_f64": rel(quant, exact), "fp8_kernel_vs_exact_f64": rel(mma, exact),
            "gemv_vs_exact_f64": rel(gemv, exact), "bf16_vs_exact_f64": rel(bf16, exact),
            "w8a16_kernel_vs_exact_f64": rel(mma16, exact), "w8a16_gemv_vs_exact_f64": rel(gemv16, exact),
            "w8a16_kernel_vs_bf16": rel(mma16, bf16)}


KINDS = {"gemv": GemvTiles, "mma": Tiles, "dequant": DequantLinear}


def tiles_dict(t: GemvTiles | Tiles | DequantLinear) -> dict:
    return {"kernel": next(k for k, c in KINDS.items() if isinstance(t, c)), **vars(t)}


def tiles_of(d: dict) -> GemvTiles | Tiles | DequantLinear:
    d = dict(d)
    return KINDS[d.pop("kernel")](**d)


class Timer:
    """fp8 timings of one cell, once per setting; a setting that does not run here is reported, not fatal."""

    def __init__(self, fn):
        self.fn, self.us, self.failed = fn, {}, []

    def __call__(self, t) -> float:
        if t not in self.us:
            try:
                self.us[t] = round(self.fn(t) * 1e6, 2)
            except Exception as e:  # noqa: BLE001
                self.failed.append(f"{t}: {type(e).__name__}: "
                                   f"{str(e).splitlines()[0][:160] if str(e) else ''}")
                self.us[t] = float("inf")
        return self.us[t]


PEER: dict = {"layout": None, "refused": []}   # --torch-peer: the scale layout this torch build took, or why
                                               # not


def _torch_peer(x: torch.Tensor, w8: torch.Tensor, s: torch.Tensor):
    """A call of torch's blockwise scaled_mm on (x, w8, s) that matches fp8_matmul, or None (PEER says
    why)."""
    try:
        from torch.nn.functional import ScalingType, scaled_mm
    except ImportError as e:
        PEER["refused"].append(f"import: {e}")
        return None
    x8, xs = quantize_rows_gpu(x, 128)
    ref = fp8_matmul(x, w8, s, (128, 128), mode="w8a8").float()   # torch quantizes the rows too
    # outer-major by construction: strides (1, M) also for M = 1 (.t().contiguous().t() keeps (K/128, 1)
    # there, which torch 2.11's check refuses: "scale_a must have strides (1, 1)")
    a_layouts = {"a[M,K/128] outer-major": lambda v: torch.empty_strided(v.shape, (1, v.shape[0]),
                                                                         dtype=v.dtype,
                                                                         device=v.device).copy_(v),
                 "a[M,K/128] row-major": lambda v: v}
    b_layouts = {"b[N/128,K/128]": lambda v: v, "b[K/128,N/128] view": lambda v: v.t(),
                 "b[K/128,N/128] contiguous": lambda v: v.t().contiguous()}
    for (an, af), (bn, bf) in itertools.product(a_layouts.items(), b_layouts.items()):
        if PEER["layout"] not in (None, (an, bn)):
            continue
        try:
            out = scaled_mm(x8, w8.t(), af(xs), ScalingType.BlockWise1x128, bf(s),
                            ScalingType.BlockWise128x128, output_dtype=torch.bfloat16)
            err = ((out.float() - ref).norm() / ref.norm()).item()
            if err > 1e-2:
                raise ValueError(f"ran, but {err:.3g} norm-relative from ours")
        except Exception as e:  # noqa: BLE001 - a refusing peer is reported, not fatal
            why = f"{an}, {bn}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            if why not in PEER["refused"]:
                PEER["refused"].append(why)
            continue
        PEER["layout"] = (an, bn)

        def call(i, xx, wl, sl):   # weight copy i of the lists wl, sl
            q8, qs = quantize_rows_gpu(xx, 128)
            return scaled_mm(q8, wl[i].t(), af(qs), ScalingType.BlockWise1x128, bf(sl[i]),
                             ScalingType.BlockWise128x128, output_dtype=torch.bfloat16)
        return call
    return None


def cell(name: str, N: int, K: int, M: int, hbm: float, cands: list, peer: bool = False,
         floor: bool = False) -> dict:
    w_bytes = N * K
    copies = max(2, -(-2 * L2_BYTES // w_bytes))
    w8 = [torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn) for _ in range(copies)]
    s = [torch.rand(-(-N // 128), -(-K // 128), device="cuda") * 1e-2 + 1e-3 for _ in range(copies)]
    wb = [w.to(torch.bfloat16) for w in w8[:max(2, -(-2 * L2_BYTES // (2 * w_bytes)))]]
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    fp8 = Timer(lambda t: _graph_time(lambda i: fp8_matmul(x, w8[i], s[i], (128, 128), tiles=t,
                                                           **method(MODE[0])),
                                      copies))
    bf16 = round(_graph_time(lambda i: F.linear(x, wb[i % len(wb)]), len(wb)) * 1e6, 2)
    roof = round((w_bytes + s[0].numel() * 4 + 2 * M * (K + N)) / (hbm * 1e12) * 1e6, 2)
    gemv = ((current_tables(torch.device("cuda", 0)).gemv.get((N, K)) or DEFAULT_GEMV)
            if M <= GEMV_MAX_M else None)
    shipped = choose_tiles(N, K, M, a16=method(MODE[0])["mode"] == "w8a16", device=torch.device("cuda", 0))
    row = _row(name, N, K, M, fp8, bf16, roof, cands, gemv, shipped,
               errors(x, w8[0], s[0]) if M == 8 else None)
    row["mode"] = MODE[0]
    for m in MODE[1:]:   # --modes: the shipped setting under the other methods too, same weights
        us = round(_graph_time(lambda i: fp8_matmul(x, w8[i], s[i], (128, 128), **method(m)), copies) * 1e6,
                   2)
        row.update({f"after_{m}_us": us, f"bf16_over_after_{m}": round(bf16 / us, 3)})
    if floor and FLOOR_DONE.setdefault((N, K), M) == M:   # once per shape (the first M): the floor has no
                                                          # rows
        from benchmarks.read_floor import read_floor_us
        us, setting = read_floor_us(w8, _graph_time)
        bus, _ = read_floor_us(wb, _graph_time)
        row.update(read_floor_us=us, read_floor_setting=setting, read_floor_over_roofline=round(us / roof, 3),
                   bf16_read_floor_us=bus, after_over_read_floor=round(row["after_us"] / us, 3))
    call = _torch_peer(x, w8[0], s[0]) if peer else None
    if call is not None:
        us = round(_graph_time(lambda i: call(i, x, w8, s), copies) * 1e6, 2)
        row.update(torch_us=us, torch_over_roofline=round(us / roof, 3), bf16_over_torch=round(bf16 / us, 3))
    return row


def _row(name, N, K, M, fp8: Timer, bf16: float, roof: float, cands: list, gemv_tiles, after_tiles,
         errs) -> dict:
    before = fp8(BEFORE_TILES)
    gemv = fp8(gemv_tiles) if gemv_tiles is not None else None
    after = fp8(after_tiles)
    row = {"shape": name, "N": N, "K": K, "M": M, "before_us": before, "gemv_us": gemv, "after_us": after,
           "bf16_us": bf16, "roofline_us": roof, "after_vs_before": round(before / after, 3),
           "bf16_over_after": round(bf16 / after, 3), "after_over_roofline": round(after / roof, 3),
           "bf16_over_roofline": round(bf16 / roof, 3), "after_tiles": tiles_dict(after_tiles)}
    for t in cands:
        fp8(t)
    if cands:
        best = min(fp8.us, key=fp8.us.get)
        row.update(best_us=fp8.us[best], best_tiles=tiles_dict(best),
                   best_over_roofline=round(fp8.us[best] / roof, 3),
                   bf16_over_best=round(bf16 / fp8.us[best], 3),
                   timed=[{"tiles": tiles_dict(t), "us": us} for t, us in fp8.us.items()])
    if fp8.failed:
        row["failed"] = fp8.failed
    if errs is not None:
        row["errors"] = errs
    return row


@functools.lru_cache(maxsize=1)
def _experts(N: int, K: int, experts: int) -> tuple:
    """Random e4m3 experts [E, N, K] (no NaN codes), their factors, and bf16 experts for torch._grouped_mm."""
    g = torch.Generator(device="cuda").manual_seed(N)
    bits = torch.randint(0, 0x7E, (experts, N, K), device="cuda", dtype=torch.uint8, generator=g)
    w8 = (bits | (torch.randint(0, 2, bits.shape, device="cuda", dtype=torch.uint8, generator=g) << 7)).view(
        torch.float8_e4m3fn)
    del bits
    s = torch.rand(experts, -(-N // 128), -(-K // 128), device="cuda", generator=g) * 1e-3 + 1e-4
    wb = (torch.randn(experts, N, K, device="cuda", dtype=torch.bfloat16, generator=g)
          if hasattr(torch, "_grouped_mm") else None)
    return w8, s, wb


def grouped_cell(name: str, N: int, K: int, M: int, hbm: float, cands: list = (), experts: int = 256,
                 top_k: int = 8) -> dict:
    """The grouped GEMM of a decode step's routed experts: M tokens x top_k rows sorted by expert."""
    w8, s, wb = _experts(N, K, experts)
    g = torch.Generator(device="cuda").manual_seed(M)
    calls, busy = [], []
    for _ in range(CALLS):   # a new routing every call: its experts' weights are not in L2 from the call
                             # before
        idx = torch.rand(M, experts, device="cuda", generator=g).topk(top_k, dim=-1).indices.reshape(-1)
        counts = torch.bincount(idx, minlength=experts)
        calls.append((torch.randn(M * top_k, K, device="cuda", dtype=torch.bfloat16, generator=g),
                      counts.cumsum(0).to(torch.int32)))
        busy.append(int((counts > 0).sum()))
    fp8 = Timer(lambda t: _graph_time(lambda i: fp8_matmul(calls[i][0], w8, s, (128, 128), ends=calls[i][1],
                                                           tiles=t, **method(MODE[0])),
                                      CALLS))
    bf16 = (round(_graph_time(lambda i: torch._grouped_mm(calls[i][0], wb.transpose(1, 2), offs=calls[i][1]),
                              CALLS)
                  * 1e6, 2) if wb is not None else float("nan"))
    per_expert = N * K + s[0].numel() * 4
    roof = round((statistics.mean(busy) * per_expert + 2 * M * top_k * (K + N)) / (hbm * 1e12) * 1e6, 2)
    rows = max(1, M * top_k // experts)
    shipped = choose_tiles(N, K, rows, experts, method(MODE[0])["mode"] == "w8a16", M * top_k,
                           device=torch.device("cuda", 0))
    row = _row(name, N, K, M, fp8, bf16, roof, list(cands), DEFAULT_GEMV, shipped, None)
    row.update(experts=experts, top_k=top_k, rows_per_expert=rows, mode=MODE[0],
               busy_experts_mean=statistics.mean(busy))
    for m in MODE[1:]:
        us = round(_graph_time(lambda i: fp8_matmul(calls[i][0], w8, s, (128, 128), ends=calls[i][1],
                                                    **method(m)),
                               CALLS) * 1e6, 2)
        row.update({f"after_{m}_us": us, f"bf16_over_after_{m}": round(bf16 / us, 3)})
    return row


def fields(t: GemvTiles | Tiles) -> dict:
    """A setting as the tuning table holds it: the fields that differ from the defaults."""
    return {k: v for k, v in vars(t).items() if v != getattr(type(t)(), k)}


def grouped_choice(r: dict, margin: float = GROUPED_MARGIN) -> tuple[Tiles, float, float]:
    """A swept grouped row's (setting for the table, its us, DEFAULT_TILES' us): the fastest MMA setting where
    it beats DEFAULT_TILES by `margin` (a fraction of DEFAULT_TILES' time), else DEFAULT_TILES."""
    timed = [(tiles_of(e["tiles"]), e["us"]) for e in r["timed"]]
    default = next(us for t, us in timed if t == DEFAULT_TILES)
    best, us = min(((t, us) for t, us in timed if isinstance(t, Tiles)), key=lambda p: p[1])
    kept = us <= default * (1 - margin) and us != float("inf")
    return (best, us, default) if kept else (DEFAULT_TILES, default, default)


def grouped_tables(rows: list[dict], margin: float = GROUPED_MARGIN) -> dict:
    """The grouped sections the sweep's grouped rows make, per method: per shape, [[most rows per expert,
    fields]] ascending, a bound per swept row count (merged where the next one keeps the same setting; none
    past the last that beats DEFAULT_TILES: the rules' DEFAULT_TILES there anyway)."""
    by: dict = {}
    for r in rows:
        section = GROUPED_SECTIONS.get(r.get("mode"))
        if "timed" in r and "experts" in r and section and r["rows_per_expert"] <= M_TILE_ROWS:
            key = f"{r['N']},{r['K']}"
            by.setdefault(section, {}).setdefault(key, {})[r["rows_per_expert"]] = grouped_choice(r,
                                                                                                  margin)[0]
    return _sections(by)


def _sections(by: dict, trim: bool = True) -> dict:
    """{section: {"N,K": {rows: setting}}} as the table holds it: per shape [[most rows, fields]] ascending,
    merged where the next bound keeps the same setting; `trim`: none past the last that differs from
    DEFAULT_TILES (the rules' setting there anyway; the dense sections keep them: under w8a16 a shape without
    its own entry would take w8a8's, and a merge would keep the table's older entry of a shape this sweep
    found best at the default)."""
    out: dict = {}
    for section, shapes in sorted(by.items()):
        for key, picks in sorted(shapes.items()):
            entries: list = []
            for most, t in sorted(picks.items()):
                if entries and entries[-1][1] == t:
                    entries.pop()
                entries.append((most, t))
            while trim and entries and entries[-1][1] == DEFAULT_TILES:
                entries.pop()
            if entries:
                out.setdefault(section, {})[key] = [[most, fields(t)] for most, t in entries]
    return out


def table(rows: list[dict], margin: float = GROUPED_MARGIN) -> dict:
    """The fp8_gemm tuning table's data the sweep's bests make (dcpctl/runtime/kernels/fp8_tiles.py): per
    shape, the MMA setting that was fastest per swept M the table serves (more than fp8_tiles.GEMV_ROWS; under
    w8a16 up to M_TILE_ROWS, past it the rules' prefill settings run) in the method's section (DENSE_SECTIONS:
    "dense_w8a16" for w8a16, "dense" for w8a8 or a row without a mode), the few-rows setting with the least
    total time over the swept M it runs (up to GEMV_ROWS) where it beat every MMA setting timed at some such
    M, else null ("gemv"), and the grouped rows' sections (grouped_tables)."""
    mma: dict = {}
    gemv: dict = {}
    for r in rows:
        if "timed" not in r or "experts" in r:
            continue
        key = (r["N"], r["K"])
        timed = [(tiles_of(e["tiles"]), e["us"]) for e in r["timed"]]
        mmas = [(t, us) for t, us in timed if isinstance(t, Tiles)]
        best_mma = min((us for _, us in mmas), default=float("inf"))
        for t, us in timed:
            if isinstance(t, GemvTiles) and r["M"] <= GEMV_ROWS:
                gemv.setdefault(key, {}).setdefault(t, {})[r["M"]] = (us, us < best_mma)
        section = DENSE_SECTIONS.get(r.get("mode"), "dense")
        if mmas and GEMV_ROWS < r["M"] and (r["M"] <= M_TILE_ROWS or section == "dense"):
            best = min(mmas, key=lambda p: p[1])[0]
            mma.setdefault(section, {}).setdefault(f"{key[0]},{key[1]}", {})[r["M"]] = best
    out: dict = {"dense": {}, **_sections(mma, trim=False), "gemv": {}}
    for (n, k), by in sorted(gemv.items()):
        ms = set.intersection(*(set(v) for v in by.values()))
        t = min(by, key=lambda t: sum(by[t][m][0] for m in ms))
        out["gemv"][f"{n},{k}"] = fields(t) if any(by[t][m][1] for m in ms) else None
    return {**out, **grouped_tables(rows, margin)}


def merge(data: dict, command: str, path: str, swept: set[str] = frozenset()) -> tuple[dict, str]:
    """data with what the fp8_gemm table file at path has beside it, and the command saying where that comes
    from (a table records one command: this run's, then theirs): the sections data leaves empty, and in a
    section both have, the entries of shapes ("N,K") this run did not time (`swept`: a sweep of a few shapes
    keeps the others')."""
    from dcpctl import tuning
    old = tuning.read(path)
    if old["kind"] != "fp8_gemm":
        raise SystemExit(f"fp8_gemm.py: --merge-table {path} is a {old['kind']} table, not fp8_gemm")
    kept = {k: v for k, v in old["data"].items() if v and not data.get(k)}
    shapes = {k: {n: e for n, e in v.items() if n not in swept and n not in data[k]}
              for k, v in old["data"].items() if v and data.get(k) and isinstance(v, dict)}
    shapes = {k: v for k, v in shapes.items() if v}
    if not kept and not shapes:
        return data, command
    out = {**kept, **{k: v for k, v in data.items() if v or k not in kept}}
    for k, v in shapes.items():
        out[k] = {**v, **data[k]}
    where = [f"sections {', '.join(kept)}"] if kept else []
    where += [f"{k} of shapes {', '.join(sorted(v))}" for k, v in shapes.items()]
    return out, f"{command}; {'; '.join(where)} kept from {path} (commit {old['commit']}: {old['command']})"


def _print(r: dict) -> None:
    gemv = "-" if r["gemv_us"] is None else r["gemv_us"]
    print(f"{r['shape']:18} {r['M']:>3} {r['before_us']:>7} {gemv:>7} {r['after_us']:>7} {r['bf16_us']:>7} "
          f"{r['roofline_us']:>6} {r['bf16_over_after']:>6} {r['after_over_roofline']:>6}"
          + (f"  best {r['best_us']} {r['best_tiles']}" if "best_us" in r else "")
          + (f"  torch {r['torch_us']} ({r['torch_over_roofline']} of roof)" if "torch_us" in r else "")
          + (f"  read floor {r['read_floor_us']} ({r['read_floor_over_roofline']} of roof; bf16 "
             f"{r['bf16_read_floor_us']})"
             if "read_floor_us" in r else ""), flush=True)
    for f in r.get("failed", []):
        print(f"  failed: {f}", flush=True)
    if "errors" in r:
        print(f"  errors at M=8: {r['errors']}", flush=True)
    if "experts" in r and "timed" in r:
        t, us, default = grouped_choice(r)
        print(f"  {r['rows_per_expert']} rows per expert: DEFAULT_TILES {default} us, for the table "
              f"{fields(t)} {us} us (bf16 torch._grouped_mm {r['bf16_us']} us: "
              f"{round(r['bf16_us'] / us, 3)}x)", flush=True)


def _save(path: str | None, rows: list[dict]) -> None:
    if path:
        with open(path, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "cuda": torch.version.cuda,
                       "torch_peer": PEER, "before_tiles": vars(BEFORE_TILES), **EXTRA, "rows": rows}, f,
                      indent=1)


def _add(rows: list[dict], fn, name: str, N: int, K: int, M: int, *rest) -> None:
    """One cell's row, printed; a cell that fails is recorded and the run goes on (one device call, every
    cell)."""
    try:
        rows.append(fn(name, N, K, M, *rest))
    except Exception as e:  # noqa: BLE001
        rows.append({"shape": name, "N": N, "K": K, "M": M, "error": f"{type(e).__name__}: {str(e)[:300]}"})
        print(f"{name:18} {M:>3} failed: {rows[-1]['error']}", flush=True)
        return
    _print(rows[-1])


def grouped_batches(args: argparse.Namespace) -> list[int]:
    """The grouped cells' token counts M: --batches, or --grouped-rows' rows per expert x experts / 8
    (top-8)."""
    if not args.grouped_rows:
        return list(args.batches)
    return [max(1, -(-r * args.experts // 8)) for r in args.grouped_rows]


def grouped_candidates(args: argparse.Namespace, M: int, sweep: bool) -> list:
    """The settings a grouped cell times besides the shipped ones: --a16-candidates' (prefill's too above
    M_TILE_ROWS rows per expert), or with --sweep and --grouped-rows GROUPED_DECODE's at decode's rows per
    expert."""
    rows = M * 8 // args.experts
    if args.a16_candidates:
        return GROUPED_A16 + (GROUPED_PREFILL_A16 if rows > M_TILE_ROWS else [])
    decode = sweep and args.grouped_rows and rows <= M_TILE_ROWS
    return GROUPED_DECODE[method(MODE[0])["mode"]] if decode else []


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--hbm-tbps", type=float, default=4.2,
                    help="HBM bandwidth for the roofline (measured copy)")
    ap.add_argument("--sweep", action="store_true",
                    help="also time every GEMV_CANDIDATES (M <= 16) and CANDIDATES (M > 1) setting per cell")
    ap.add_argument("--sweep-m", type=int, nargs="+", default=list(BATCHES), help="sweep only at these M")
    ap.add_argument("--budget-s", type=float, default=150.0,
                    help="stop sweeping (before/after only) past this")
    ap.add_argument("--table", action="store_true",
                    help="print the tuning table's data the sweep's bests make")
    ap.add_argument("--save-table",
                    help="write it as this GPU's fp8_gemm tuning table (dcpctl/tuning/fp8_gemm)")
    ap.add_argument("--a16-candidates", action="store_true",
                    help="sweep A16_CANDIDATES instead (w8a16 at 8-64 rows: the weight factor folded in)")
    ap.add_argument("--grouped", action="store_true", help="also the grouped MoE GEMMs (256 experts, top-8)")
    ap.add_argument("--experts", type=int, default=256,
                    help="the grouped GEMMs' expert count (top-8 of them)")
    ap.add_argument("--grouped-rows", type=int, nargs="+",
                    help="time the grouped GEMMs at these rows per expert instead of --batches (with "
                         "--sweep: the GROUPED_DECODE settings too, up to M_TILE_ROWS rows, for the table's "
                         "grouped section)")
    ap.add_argument("--merge-table", help="--save-table keeps the sections of this fp8_gemm table file that "
                                          "this run did not write (e.g. the shipped one of this GPU)")
    ap.add_argument("--torch-peer", action="store_true",
                    help="also time torch's blockwise scaled_mm (cuBLAS) where this build takes it")
    ap.add_argument("--modes", nargs="+", choices=METHODS, default=None,
                    help="the FP8 method of every timing (default w8a16); the others also "
                         "time the shipped setting under them (w8a16f / w8a16b: w8a16 through the fp16 / "
                         "bf16 MMA, fp8_matmul's a16_mma)")
    ap.add_argument("--read-floor", action="store_true",
                    help="also time a read-only kernel over each shape's FP8 and bf16 weight (read_floor.py) "
                         "and an empty kernel: the least any GEMM of that weight can take")
    ap.add_argument("--batches", type=int, nargs="+", default=list(BATCHES), help="token counts M")
    ap.add_argument("--shapes", nargs="*", choices=list(SHAPES), default=list(SHAPES),
                    help="dense shapes (none: --shapes alone, e.g. with --grouped)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("fp8_gemm.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    rows, t0 = [], time.perf_counter()
    MODE[:] = args.modes or ["w8a16"]   # the tile tables are per method; auto is no method of its own
    EXTRA["modes"] = list(MODE)
    if args.read_floor:
        from benchmarks.read_floor import empty_us
        EXTRA["empty_kernel_us"] = empty_us(_graph_time)
        print(f"an empty kernel in the graph: {EXTRA['empty_kernel_us']} us", flush=True)
    print(f"{'shape':18} {'M':>3} {'before':>7} {'gemv':>7} {'after':>7} {'bf16':>7} {'roof':>6} "
          f"{'x bf16':>6} {'/roof':>6}  (us)")
    for M in args.batches:   # M outside: the sweep budget reaches every shape at the first swept M
        for name in args.shapes:
            N, K = SHAPES[name]
            sweep = args.sweep and M in args.sweep_m and time.perf_counter() - t0 < args.budget_s
            prefill = PREFILL_A16 + (PREFILL_A16_DEQUANT if method(MODE[0])["mode"] == "w8a16" else [])
            _add(rows, cell, name, N, K, M, args.hbm_tbps,
                 ((A16_CANDIDATES if M <= M_TILE_ROWS else prefill) if args.a16_candidates else
                  (GEMV_CANDIDATES if M <= GEMV_MAX_M else []) + (CANDIDATES if M > 1 else []))
                 if sweep else [],
                 args.torch_peer,
                 args.read_floor)
            _save(args.json, rows)   # after every cell: a run cut short by its time limit keeps what it timed
    for M in grouped_batches(args) if args.grouped else ():   # M outside, as above (_experts keeps one
                                                              # shape's)
        for name, (N, K) in GROUPED.items():
            sweep = args.sweep and time.perf_counter() - t0 < args.budget_s
            _add(rows, grouped_cell, name, N, K, M, args.hbm_tbps, grouped_candidates(args, M, sweep),
                 args.experts)
            _save(args.json, rows)
    _experts.cache_clear()   # 256 experts: 22 GB
    torch.cuda.empty_cache()
    if args.torch_peer:
        print("torch blockwise scaled_mm: "
              f"{'took ' + ', '.join(PEER['layout']) if PEER['layout'] else 'refused'}"
              + "".join(f"\n  refused: {r}" for r in PEER["refused"]), flush=True)
    print(f"{time.perf_counter() - t0:.0f} s")
    if args.table:
        print(json.dumps(table(rows), indent=1))
    if args.save_table:
        from dcpctl import tuning
        major, minor = torch.cuda.get_device_capability()
        data, command = table(rows), "python -m benchmarks.fp8_gemm " + " ".join(sys.argv[1:])
        if args.merge_table:
            data, command = merge(data, command, args.merge_table, {f"{r['N']},{r['K']}" for r in rows})
        tuning.write(args.save_table, "fp8_gemm", torch.cuda.get_device_name(), major * 10 + minor, command,
                     tuning.source_commit(), data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
