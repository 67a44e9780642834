"""A split-K Triton GEMM for the decode step's 16-bit linear layers, where a tuning table measured it faster than cuBLAS.

    y = linear16(x [R, K], w [N, K], tiles) -> [R, N]     x and w bf16/fp16 of one dtype, R <= MAX_ROWS

Each program streams one [BN, K / splits] slab of W once for all R rows (W's rows on the MMA's M side: acc [BN, BM]
= W x^T); the K splits' fp32 partials are summed by the N tile's last program, in split order
(fp8_parts._sum_partials, the FP8 GEMM's reduction), so one launch does it, results are deterministic and no host
sync is needed (graph-safe).  fp32 accumulation like cuBLAS, in another order: not bit-equal to F.linear, so the
eager and the captured step both run it (the same rows go through the same kernel either way).

The choice is per (N, K, rows) from the GPU's gemm16 tuning table (dcpctl/tuning/gemm16: {"N,K": [[most rows,
{Tiles16 fields}], ...]}; the first bound covering R wins); every other shape, row count, GPU without a table or
dtype runs F.linear.  `configure` (at model load) switches it on with the `gemm16` fusion (DCPCTL_UNFUSED=gemm16
turns it off, kernels/fusions.py) and says once what runs.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from dcpctl.runtime.kernels import pdl
from dcpctl.runtime.kernels.norm_triton import triton

MAX_ROWS = 32


@dataclass(frozen=True)
class Tiles16:
    bn: int = 64        # W rows (output columns) per program
    bk: int = 128       # K per loop step
    per_sm: int = 1     # K splits until about this many programs run per SM (fp8_parts._split)
    warps: int = 4
    stages: int = 3


Table = dict[tuple[int, int], tuple[tuple[int, Tiles16], ...]]


def parse(data: dict) -> Table:
    """{"N,K": [[most rows, {Tiles16 fields}], ...]} -> Table ([] for cuBLAS at every row count)."""
    table: Table = {}
    for key, cells in data.items():
        n, k = (int(v) for v in key.split(","))
        table[(n, k)] = tuple((int(most), Tiles16(**t)) for most, t in cells)
    return table


def read_table(path: str, base: Table) -> Table:
    """`base` with the shapes of the file at `path` replaced (the tuning table's format)."""
    import json
    from dcpctl.runtime.errors import ModelLoadError
    try:
        return {**base, **parse(json.loads(open(path).read()))}
    except (OSError, ValueError, TypeError) as e:
        raise ModelLoadError(f"--gemm16-table {path}: not a GEMM table ({e})") from None


TABLE: Table = {}     # in effect: set by configure() at model load
ON = False     # set by configure() at model load


def choose(N: int, K: int, rows: int) -> Tiles16 | None:
    """The setting for this shape and row count, or None (cuBLAS)."""
    if rows < 2:
        return None
    for most, t in TABLE.get((N, K), ()):
        if rows <= most:
            return t
    return None


def shipped(device: str, sm: int | None) -> tuple[Table, str]:
    """The GPU's gemm16 table ({} for none) and which table it is (a clause)."""
    from dcpctl import tuning
    t = tuning.load("gemm16", device, sm)
    return (parse(t.data) if t.data else {}), t.how


def configure(on: bool, device: torch.device | str) -> None:
    """At model load: the table for this GPU (--gemm16-table's shapes over it); run the kernel where it says
    (when `on`, with Triton), and say so."""
    global ON, TABLE
    from dcpctl.runtime import settings
    dev = torch.device(device)
    ON, TABLE = False, {}
    if dev.type != "cuda" or triton is None:
        return
    from dcpctl.runtime.kernels.fp8_parts import prepare
    from dcpctl.runtime.notes import note_once
    from dcpctl.runtime.tuned import gpu
    base, how = shipped(*gpu(dev if dev.index is not None else torch.device("cuda", torch.cuda.current_device())))
    override = settings.current().gemm16_table
    TABLE = read_table(override, base) if override else base
    if not on:
        return
    if not TABLE:
        note_once(f"GEMMs: cuBLAS for every 16-bit linear layer (gemm16: {how})")
        return
    prepare(dev)     # the tile counts, allocated now rather than inside a graph capture
    ON = True
    note_once(f"GEMMs: dcpctl's split-K Triton kernel for {len(TABLE)} 16-bit weight shapes at 2-{MAX_ROWS} rows where "
              f"it was measured faster than cuBLAS ({'--gemm16-table ' + override + ' over ' if override else ''}"
              f"gemm16 table: {how}); cuBLAS for the rest (DCPCTL_UNFUSED=gemm16: cuBLAS for all)")


def pick(x: Tensor, w: Tensor) -> Tiles16 | None:
    """The kernel's setting for this call, or None for F.linear (asked per linear layer call)."""
    if not (ON and x.dim() == 2 and 2 <= x.shape[0] <= MAX_ROWS and x.is_cuda and x.dtype == w.dtype
            and x.dtype in (torch.bfloat16, torch.float16) and w.dim() == 2 and x.stride(1) == 1
            and w.stride(1) == 1):
        return None
    return choose(w.shape[0], w.shape[1], x.shape[0])


if triton is not None:
    import triton.language as tl

    from dcpctl.runtime.kernels.fp8_parts import _store_tile, _sum_partials

    @triton.jit
    def _gemm16_kernel(x_ptr, w_ptr, out_ptr, part_ptr, count_ptr, R, N, K, sx, sw, k_per_split, splits,
                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr,
                       PDL: tl.constexpr):
        # x [R, K], w [N, K] -> out [R, N] (contiguous); grid (N tiles, K splits); with SPLIT, part [splits, R, N]
        pdl.enter(PDL)    # launched early (pdl.py): wait for the kernel before
        pid_n, pid_k = tl.program_id(0), tl.program_id(1)
        n = pid_n * BN + tl.arange(0, BN)
        n_ok = n < N
        rows = tl.arange(0, BM)
        r_ok = rows < R
        k0 = pid_k * k_per_split
        k1 = tl.minimum(k0 + k_per_split, K)
        acc = tl.zeros((BN, BM), dtype=tl.float32)
        for k in range(k0, k1, BK):
            kk = k + tl.arange(0, BK)
            k_ok = kk < k1
            w = tl.load(w_ptr + n[:, None].to(tl.int64) * sw + kk[None, :], mask=n_ok[:, None] & k_ok[None, :],
                        other=0.0)
            x = tl.load(x_ptr + rows[:, None] * sx + kk[None, :], mask=r_ok[:, None] & k_ok[None, :], other=0.0)
            acc = tl.dot(w, tl.trans(x), acc)
        at = rows[None, :].to(tl.int64) * N + n[:, None]
        _store_tile(out_ptr, part_ptr, pid_k, R, N, at, acc, n_ok[:, None] & r_ok[None, :], SPLIT)
        if SPLIT:
            _sum_partials(part_ptr, out_ptr, count_ptr, pid_n, R, N, n, n_ok, splits, BM, BN, 1)


def splits_for(K: int, n_tiles: int, t: Tiles16, sms: int) -> tuple[int, int]:
    """(K splits, K columns per split: a multiple of t.bk) so that about t.per_sm programs run per SM."""
    from dcpctl.runtime.kernels.fp8_parts import _split
    nkb = -(-K // t.bk)
    per = -(-nkb // _split(nkb, n_tiles, sms, t.per_sm, 1)) * t.bk
    return -(-K // per), per


def linear16(x: Tensor, w: Tensor, t: Tiles16, sms: int | None = None) -> Tensor:
    # x: [R, K]  w: [N, K] -> [R, N] in x's dtype
    from dcpctl.runtime.kernels.fp8_parts import _counters
    R, K = x.shape
    N = w.shape[0]
    if sms is None:
        from dcpctl.runtime.gpu import gpu_facts
        sms = gpu_facts(x.device).sms if x.is_cuda else 1
    n_tiles = -(-N // t.bn)
    splits, per = splits_for(K, n_tiles, t, sms)
    out = torch.empty((R, N), dtype=x.dtype, device=x.device)
    part = torch.empty((splits, R, N), dtype=torch.float32, device=x.device) if splits > 1 else out
    _gemm16_kernel[(n_tiles, splits)](x, w, out, part, _counters(x.device, n_tiles), R, N, K, x.stride(0), w.stride(0),
                                      per, splits, BM=max(16, triton.next_power_of_2(R)), BN=t.bn, BK=t.bk,
                                      SPLIT=splits > 1, num_warps=t.warps, num_stages=t.stages, **pdl.kw())
    return out
