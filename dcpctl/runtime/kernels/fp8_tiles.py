"""Which block-FP8 method, kernel and tile setting a GEMM runs: rules by row count, and the GPU's fp8_gemm
tuning table.

    method(N, K, rows, experts, setting) -> w8a16 | w8a8 | cublas     the method (module fp8_parts' CHOICES)
    per_expert(N, K, rows, setting) -> bool    a MoE pass runs its experts one by one (the table says where)
    choose(N, K, rows, experts, setting, ...) -> (kernel, a16)         method, then choose_tiles
    choose_tiles(N, K, rows, experts=1, a16=False, total_rows=None, device=None)
        -> Tiles | GemvTiles | DequantLinear

The method: under `auto` the table's `methods` section ({"dense"|"grouped": {"N,K": [[most rows, method],
...]}}, benchmarks/fp8_methods.py) where it covers the shape and rows, else w8a16 up to PREFILL_ROWS rows (per
expert when grouped) and w8a8 above, through cuBLAS for dense GEMMs where it runs; `w8a8`: cuBLAS for dense
GEMMs of more than PREFILL_ROWS rows, the Triton kernel otherwise; `w8a16`: always. Then the Triton kernels'
setting:

| rows (per expert when grouped)       | dense                                   | grouped (MoE)             |
| ------------------------------------ | --------------------------------------- | ------------------------- |
| <= GEMV_ROWS                         | few-rows kernel (`gemv`, else           | MMA kernel (as below)     |
|                                      |   DEFAULT_GEMV)                         |                           |
| w8a16, all rows <= GROUPED_GEMV_ROWS |                                         | few-rows kernel,          |
|   and <= GROUPED_GEMV_PER_EXPERT x E |                                         |   DEFAULT_GEMV            |
| up to M_TILE_ROWS                    | `dense_w8a16` (w8a16), else `dense`,    | `grouped_w8a16` (w8a16),  |
|                                      |   else DEFAULT_TILES                    |   else `grouped`, else    |
|                                      |                                         |   DEFAULT_TILES           |
| w8a16, M_TILE_ROWS + 1               | PREFILL_A16_TILES                       | PREFILL_GROUPED_A16_TILES |
|   .. PREFILL_DEQUANT_ROWS            |                                         |                           |
| w8a16, more                          | DEQUANT: the weight dequantized, cuBLAS | PREFILL_GROUPED_A16_TILES |
| w8a8, more                           | `dense`, else DEFAULT_TILES             | `grouped`, else           |
|                                      |                                         | PREFILL_GROUPED_A8_TILES  |

The table (dcpctl/tuning/fp8_gemm, dcpctl.tuning's device rule): {"dense": {"N,K": [[most rows, {Tiles
fields}], ...]}, "dense_w8a16": {...}, "grouped": {...}, "grouped_w8a16": {...}, "gemv": {"N,K": {GemvTiles
fields} | null (the MMA kernel)}}; the first bound covering the rows (per expert, R // E, when grouped) wins,
and rows past the last bound, or a shape the sections lack, take the rules' setting.  The grouped sections
(benchmarks/fp8_gemm.py --grouped-rows; docs/fp8.md) hold decode's rows per expert only; a table without them
runs every grouped GEMM as the rules alone do.  A GPU without a table runs the rules alone.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dcpctl.runtime.kernels import fp8_cublas
from dcpctl.runtime.kernels.fp8_cublas import CUBLAS, CublasW8a8
from dcpctl.runtime.kernels.fp8_dequant import DequantLinear
from dcpctl.runtime.kernels.fp8_gemv import GemvTiles
from dcpctl.runtime.kernels.fp8_parts import PREFILL_ROWS


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
    max_split: int = 0    # at most this many K splits (0: per_sm decides alone): the tile's last program
                          # reads splits x R x BN fp32 partials by itself, which at R = 64 outweighs a small
                          # weight
    fold: bool = False    # w8a16: fold the weight block's factor into the converted tile (rounded to the
                          # rows' dtype: the dequantized weight) so that the MMA accumulates across K blocks
                          # instead of a scaled add after each one; no effect under w8a8
    bm: int = 0           # rows per MMA tile (16, 32, 64 or 128; 0: by the row count, 16 / 32 / 64); above
                          # M_TILE_ROWS (prefill) also the rows of one program


Kernel = Tiles | GemvTiles | DequantLinear | CublasW8a8
M_TILE_ROWS = 64         # above: a dense GEMM's rows are tiled over programs (grid axis 0), one per (M, N)
                         # tile
BEFORE_TILES = Tiles()   # a quantization launch, one partial a load
DEFAULT_TILES = BEFORE_TILES
PREFILL_A16_TILES = Tiles(bm=128, bn=64, warps=8, fold=True)
DEQUANT = DequantLinear()
PREFILL_DEQUANT_ROWS = 128
PREFILL_GROUPED_A16_TILES = Tiles(bm=128, bn=128, warps=8, fold=True)
# w8a8's grouped GEMMs above M_TILE_ROWS rows an expert without a table entry, and a MoE pass past
# PER_EXPERT_ROWS rows an expert without a `methods` entry runs its experts one by one: what the H100's sweep
# chose at every prefill row count it timed (benchmarks/fp8_methods.py, fp8_methods_grouped_h100.json: this
# tile at 128-2,048 rows an expert; one cuBLAS GEMM per expert from 1,024)
PREFILL_GROUPED_A8_TILES = Tiles(bm=128, bn=128, warps=8, stages=4)
PER_EXPERT_ROWS = 512
GEMV_ROWS = 1
GROUPED_GEMV_ROWS = 64
# the few-rows kernel applies each weight slab to its expert's rows one after another on the CUDA cores: past
# ~2 rows an expert the MMA kernel wins (an H200, 16 experts top-8, w8a16 decode step: 2.28 ms at batch 8 = 4
# rows an expert on the few-rows kernel, 1.24 ms at batch 12 on the MMA kernel; benchmarks/fp8_serve.py's
# decode_step part)
GROUPED_GEMV_PER_EXPERT = 2
DEFAULT_GEMV = GemvTiles(kb=4, per_sm=16, stages=1)
ShapeTable = dict[tuple[int, int], tuple[tuple[int, Tiles], ...]]
MethodTable = dict[tuple[int, int], tuple[tuple[int, str], ...]]
# a GEMM's method (the table's `methods` section): the Triton kernels under w8a16 or w8a8, or w8a8 through
# cuBLAS (fp8_cublas.py); a grouped MoE GEMM may instead be `per_expert`: the MoE runs its experts one after
# another, each expert's GEMMs dense (a host sync a pass: outside CUDA graphs)
METHODS = ("w8a16", "w8a8", "cublas")
GROUPED_METHODS = ("w8a16", "w8a8", "per_expert")


@dataclass(frozen=True)
class Fp8Tables:
    dense: ShapeTable = field(default_factory=dict)
    dense_a16: ShapeTable = field(default_factory=dict)        # w8a16's own, where it has the shape
    grouped: ShapeTable = field(default_factory=dict)          # grouped GEMMs, by rows per expert (<=
                                                               # M_TILE_ROWS)
    grouped_a16: ShapeTable = field(default_factory=dict)      # w8a16's own, where it has the shape
    gemv: dict[tuple[int, int], GemvTiles | None] = field(default_factory=dict)
    methods: MethodTable = field(default_factory=dict)            # dense GEMMs, by rows
    grouped_methods: MethodTable = field(default_factory=dict)    # grouped, by rows per expert
    how: str = "built-in rules only"


def _key(text: str) -> tuple[int, int]:
    n, k = (int(v) for v in text.split(","))
    return n, k


def parse(data: dict[str, Any], how: str) -> Fp8Tables:
    shapes = lambda d: {_key(s): tuple((int(most), Tiles(**t)) for most, t in c) for s, c in d.items()}  # noqa: E731
    gemv = {_key(s): None if t is None else GemvTiles(**t) for s, t in data.get("gemv", {}).items()}
    m = data.get("methods", {})

    def methods(d: dict, valid: tuple[str, ...]) -> MethodTable:
        out = {_key(s): tuple((int(most), str(v)) for most, v in c) for s, c in d.items()}
        bad = sorted({v for c in out.values() for _, v in c} - set(valid))
        if bad:
            raise ValueError(f"fp8_gemm table {how}: method(s) {', '.join(bad)}; valid: {', '.join(valid)}")
        return out
    return Fp8Tables(*(shapes(data.get(k, {})) for k in ("dense", "dense_w8a16", "grouped", "grouped_w8a16")),
                     gemv=gemv, methods=methods(m.get("dense", {}), METHODS),
                     grouped_methods=methods(m.get("grouped", {}), GROUPED_METHODS), how=how)


def tables_for(device: str, sm: int | None) -> Fp8Tables:
    """The fp8_gemm tables of a GPU by dcpctl.tuning's device rule (none: Fp8Tables())."""
    from dcpctl import tuning
    t = tuning.load("fp8_gemm", device, sm)
    return parse(t.data, t.how) if t.data else Fp8Tables(how=t.how)


_by_device: dict[str, Fp8Tables] = {}
_NONE = Fp8Tables()


def current(device: Any = None) -> Fp8Tables:
    """The tables for a CUDA device (said once per GPU), Fp8Tables() elsewhere."""
    if getattr(device, "type", None) != "cuda":
        return _NONE
    key = str(device)
    if key not in _by_device:
        import torch

        from dcpctl.runtime import tuned
        dev = device if device.index is not None else torch.device("cuda", torch.cuda.current_device())
        t = tuned.table("fp8_gemm", dev)
        _by_device[key] = parse(t.data, t.how) if t.data else Fp8Tables(how=t.how)
    return _by_device[key]


def _measured(table: MethodTable, N: int, K: int, rows: int) -> str | None:
    return next((v for most, v in table.get((N, K), ()) if rows <= most), None)


def method(N: int, K: int, rows: int, experts: int, setting: str, block: tuple[int, int] = (128, 128),
           device: Any = None, tables: Fp8Tables | None = None) -> str:
    """The method of one GEMM (METHODS) under the runtime.fp8_gemm setting (fp8_parts.CHOICES); rows: per
    expert when grouped.  w8a16: always.  w8a8: cuBLAS for dense GEMMs of more than PREFILL_ROWS rows where
    it runs here, the Triton kernel otherwise.  auto: the table's `methods` entry for the shape and rows,
    else w8a16 up to PREFILL_ROWS rows and w8a8 above (cuBLAS where it runs, for dense GEMMs)."""
    if setting == "w8a16":
        return "w8a16"
    tab = tables if tables is not None else current(device)
    cublas = experts == 1 and fp8_cublas.usable(N, K, block, device)
    if setting == "auto":
        got = _measured(tab.methods if experts == 1 else tab.grouped_methods, N, K, rows)
        if got == "per_expert":
            got = None
        if got is not None:
            return "w8a8" if got == "cublas" and not cublas else got
        if rows <= PREFILL_ROWS:
            return "w8a16"
    return "cublas" if cublas and rows > PREFILL_ROWS else "w8a8"


def per_expert(N: int, K: int, rows: int, setting: str, device: Any = None,
               tables: Fp8Tables | None = None) -> bool:
    """Whether a MoE pass of `rows` rows per expert (gate+up of [N, K] per expert) runs its experts one after
    another (each expert's GEMMs dense: cuBLAS at prefill rows) rather than grouped (w8a8 and auto): where the
    table's `grouped` methods say `per_expert`, else past PER_EXPERT_ROWS rows an expert."""
    if setting == "w8a16":
        return False
    tab = tables if tables is not None else current(device)
    got = _measured(tab.grouped_methods, N, K, rows)
    return got == "per_expert" if got is not None else rows > PER_EXPERT_ROWS


def choose(N: int, K: int, rows: int, experts: int, setting: str, total_rows: int | None = None,
           block: tuple[int, int] = (128, 128), device: Any = None,
           tables: Fp8Tables | None = None) -> tuple[Kernel, bool]:
    """(kernel, a16): the GEMM's method (`method`), then for the Triton kernels their setting
    (choose_tiles)."""
    m = method(N, K, rows, experts, setting, block, device, tables)
    if m == "cublas":
        return CUBLAS, False
    a16 = m == "w8a16"
    return choose_tiles(N, K, rows, experts, a16, total_rows, device, tables), a16


def choose_tiles(N: int, K: int, rows: int, experts: int = 1, a16: bool = False,
                 total_rows: int | None = None, device: Any = None,
                 tables: Fp8Tables | None = None) -> Kernel:
    """The kernel and tile setting for this shape and row count (per expert when grouped; total_rows: all the
    grouped GEMM's rows), by the module docstring's table; `tables` (default: the device's) gives the
    shapes."""
    tab = tables if tables is not None else current(device)
    gemv = tab.gemv.get((N, K), DEFAULT_GEMV)
    if experts == 1 and rows <= GEMV_ROWS and gemv is not None:
        return gemv
    if experts > 1 and a16 and total_rows is not None and \
            total_rows <= min(GROUPED_GEMV_ROWS, GROUPED_GEMV_PER_EXPERT * experts):
        return DEFAULT_GEMV
    if experts == 1 and a16 and rows > PREFILL_DEQUANT_ROWS:
        return DEQUANT
    if experts == 1 and a16 and rows > M_TILE_ROWS:
        return PREFILL_A16_TILES
    if experts > 1 and a16 and rows > M_TILE_ROWS:
        return PREFILL_GROUPED_A16_TILES
    for most, t in _entries(tab, N, K, rows, experts, a16):
        if rows <= most:
            return t
    return PREFILL_GROUPED_A8_TILES if experts > 1 and rows > M_TILE_ROWS else DEFAULT_TILES


def _entries(tab: Fp8Tables, N: int, K: int, rows: int, experts: int,
             a16: bool) -> tuple[tuple[int, Tiles], ...]:
    # the table's (most rows, setting) entries for this GEMM: w8a16's own section where it has the shape
    # (a w8a16 prefill never reaches here: the rules above decide it)
    own, plain = (tab.dense_a16, tab.dense) if experts == 1 else (tab.grouped_a16, tab.grouped)
    return (own if a16 and (N, K) in own else plain).get((N, K), ())


def methods_note(setting: str, device: Any = None) -> str:
    """Which rows take which method under `setting` (said once at load)."""
    tab = current(device)
    ok, why = fp8_cublas.probe(str(device)) if getattr(device, "type", None) == "cuda" else (False, "no GPU")
    prefill = ("cuBLAS's block-scaled FP8 GEMM (w8a8)" if ok else
               f"the Triton w8a8 kernel (no cuBLAS: {why})")
    if setting == "w8a16":
        return "FP8 GEMM method: w8a16 for every GEMM (--fp8-gemm w8a16)"
    experts = (f"a MoE pass of more than {PER_EXPERT_ROWS} rows an expert (unless the table says otherwise) "
               "runs its experts one by one, each expert's GEMMs dense, where each is large enough to hide "
               "the host's launches")
    if setting == "w8a8":
        return (f"FP8 GEMM method: w8a8 for every GEMM (--fp8-gemm w8a8): dense GEMMs of more than "
                f"{PREFILL_ROWS} rows {prefill}, the others the Triton w8a8 kernel; {experts}")
    measured = (f"; the fp8_gemm table ({tab.how}) sets {len(tab.methods)} dense and "
                f"{len(tab.grouped_methods)} grouped shape(s) by measured row bounds" if
                tab.methods or tab.grouped_methods else "")
    return (f"FP8 GEMM method (--fp8-gemm auto): GEMMs of up to {PREFILL_ROWS} rows (per expert when "
            "grouped; decode) w8a16, where reading the e4m3 weight is the cost and 16-bit activations cost "
            f"nothing; more rows (prefill) w8a8, where the e4m3 MMA's rate pays: dense GEMMs {prefill}, "
            f"grouped ones the Triton w8a8 kernel; {experts}{measured}")


def tiles_note(device: Any = None) -> str:
    tab = current(device)
    return (f"FP8 GEMM kernels: dense GEMMs of up to {GEMV_ROWS} row(s) the weight-streaming kernel "
            f"{DEFAULT_GEMV} (but {sum(v is None for v in tab.gemv.values())} shape(s) on the MMA kernel), "
            f"otherwise the MMA kernel (dense GEMMs of {len(tab.dense)} shape(s) from the fp8_gemm tuning "
            f"table, {tab.how}; w8a16: {len(tab.dense_a16)} of them its own; the grouped MoE GEMMs of up to "
            f"{M_TILE_ROWS} rows per expert from the table where it has their shape and rows "
            f"({len(tab.grouped)} shape(s), {len(tab.grouped_a16)} of w8a16's own); the other GEMMs "
            f"{DEFAULT_TILES}, but w8a16's grouped GEMMs of up to {GROUPED_GEMV_ROWS} rows and "
            f"{GROUPED_GEMV_PER_EXPERT} per expert the weight-streaming kernel, its dense GEMMs of "
            f"{M_TILE_ROWS + 1}-{PREFILL_DEQUANT_ROWS} rows {PREFILL_A16_TILES} and of more the weight "
            f"dequantized to the rows' dtype for cuBLAS, its grouped GEMMs of more than {M_TILE_ROWS} rows "
            f"per expert {PREFILL_GROUPED_A16_TILES}; above {M_TILE_ROWS} rows a dense GEMM's rows are tiled "
            "over programs)")
