"""A split-K Triton GEMM for the decode step's 16-bit linear layers, where it was measured faster than cuBLAS.

    y = linear16(x [R, K], w [N, K], tiles) -> [R, N]     x and w bf16/fp16 of one dtype, R <= MAX_ROWS

Why: at 2-32 rows cuBLAS (torch's F.linear, cuBLASLt) ran four of the issue-17 checkpoint's five GEMMs at 1.2-2.0x
their time at the copy bandwidth, and this kernel beat it by 4-12% on some (TABLE).  Each program streams one
[BN, K / splits] slab of W once for all R rows (W's rows on the MMA's M side: acc [BN, BM] = W x^T); the K splits'
fp32 partials are summed by the N tile's last program, in split order (fp8_parts._sum_partials, the FP8 GEMM's
reduction), so one launch does it, results are deterministic and no host sync is needed (graph-safe).  fp32
accumulation like cuBLAS, in another order: not bit-equal to F.linear, so the eager and the captured step both run
it (the same rows go through the same kernel either way).

The choice is per (N, K, rows) from TABLE, measured on an H200 (TABLE_DEVICE) only; every other shape, row count,
GPU or dtype runs F.linear.  `configure` (at model load) switches it on with the `gemm16` fusion
(DCPCTL_UNFUSED=gemm16 turns it off, models/fusions.py) and says once what runs.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from dcpctl.runtime.models import pdl
from dcpctl.runtime.models.norm_triton import triton

MAX_ROWS = 32
TABLE_DEVICE = "NVIDIA H200"


@dataclass(frozen=True)
class Tiles16:
    bn: int = 64        # W rows (output columns) per program
    bk: int = 128       # K per loop step
    per_sm: int = 1     # K splits until about this many programs run per SM (fp8_parts._split)
    warps: int = 4
    stages: int = 3


# (N, K) -> ((most rows, Tiles16), ...): the first bound covering R wins; rows above the last bound (and one row:
# not swept) run cuBLAS.  From benchmarks/gemm16_sweep.py on an H200 (TABLE_SOURCE; us at 8 / 32 rows, cuBLAS ->
# this setting, one run): kept where the kernel beat cuBLAS by 4% or more.  Lost or within 4%: q_b_proj at 32 rows
# (21.76 -> 21.43), the dense gate+up at 32 (20.50 -> 21.47), the dense down at 8 and 32 (10.72 -> 11.87, 10.81 ->
# 12.94), which stay on cuBLAS.
TABLE: dict[tuple[int, int], tuple[tuple[int, Tiles16], ...]] = {
    (2112, 7168): ((8, Tiles16(bk=256)), (32, Tiles16(bk=256, stages=4))),     # q_a+kv_a: 13.13 -> 11.99, 14.22 -> 12.51
    (24576, 1536): ((8, Tiles16(per_sm=2)),),                                  # q_b_proj: 22.91 -> 20.90
    (7168, 16384): ((8, Tiles16(stages=4)), (32, Tiles16())),                  # o_proj: 64.13 -> 59.49, 64.67 -> 61.47
    (4096, 7168): ((8, Tiles16(stages=4)),),                                   # dense gate+up: 20.61 -> 18.96
}
TABLE_SOURCE = "benchmarks/data/h200_gemm16_sweep_s18.json"
SHIPPED = TABLE                     # what configure() restores


def read_table(path: str) -> dict[tuple[int, int], tuple[tuple[int, Tiles16], ...]]:
    """SHIPPED with the shapes of `path` replaced ({"N,K": [[most rows, {"bn": .., ...}], ...]}; [] for cuBLAS)."""
    import json
    from dcpctl.runtime.models.errors import ModelLoadError
    try:
        raw = json.loads(open(path).read())
        table = dict(SHIPPED)
        for key, cells in raw.items():
            n, k = (int(v) for v in key.split(","))
            table[(n, k)] = tuple((int(most), Tiles16(**t)) for most, t in cells)
        return table
    except (OSError, ValueError, TypeError) as e:
        raise ModelLoadError(f"--gemm16-table {path}: not a GEMM table ({e})") from None

ON = False     # set by configure() at model load


def choose(N: int, K: int, rows: int) -> Tiles16 | None:
    """The setting for this shape and row count, or None (cuBLAS)."""
    if rows < 2:
        return None
    for most, t in TABLE.get((N, K), ()):
        if rows <= most:
            return t
    return None


def configure(on: bool, device: torch.device | str) -> None:
    """At model load: run the kernel where TABLE says (when `on`, on the table's GPU, with Triton), and say so."""
    global ON, TABLE
    from dcpctl.runtime import settings
    dev = torch.device(device)
    ON = False
    override = settings.current().gemm16_table
    TABLE = read_table(override) if override else SHIPPED
    if not on or dev.type != "cuda" or triton is None:
        return
    from dcpctl.plan.attention_table import same_device
    from dcpctl.runtime.models.fp8_parts import prepare
    from dcpctl.runtime.notes import note_once
    name = torch.cuda.get_device_name(dev)
    if not same_device(name, TABLE_DEVICE):
        note_once(f"GEMMs: cuBLAS for every 16-bit linear layer (dcpctl's split-K kernel is measured on an "
                  f"{TABLE_DEVICE} only, not on {name})")
        return
    prepare(dev)     # the tile counts, allocated now rather than inside a graph capture
    ON = True
    note_once(f"GEMMs: dcpctl's split-K Triton kernel for {len(TABLE)} 16-bit weight shapes at 2-{MAX_ROWS} rows where "
              f"it was measured faster than cuBLAS on an {TABLE_DEVICE} "
              f"({override or TABLE_SOURCE}); cuBLAS for the rest (DCPCTL_UNFUSED=gemm16: cuBLAS "
              "for all)")


def pick(x: Tensor, w: Tensor) -> Tiles16 | None:
    """The kernel's setting for this call, or None for F.linear (asked per linear layer call)."""
    if not (ON and x.dim() == 2 and 2 <= x.shape[0] <= MAX_ROWS and x.is_cuda and x.dtype == w.dtype
            and x.dtype in (torch.bfloat16, torch.float16) and w.dim() == 2 and x.stride(1) == 1
            and w.stride(1) == 1):
        return None
    return choose(w.shape[0], w.shape[1], x.shape[0])


if triton is not None:
    import triton.language as tl

    from dcpctl.runtime.models.fp8_parts import _store_tile, _sum_partials

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
    from dcpctl.runtime.models.fp8_parts import _split
    nkb = -(-K // t.bk)
    per = -(-nkb // _split(nkb, n_tiles, sms, t.per_sm, 1)) * t.bk
    return -(-K // per), per


def linear16(x: Tensor, w: Tensor, t: Tiles16, sms: int | None = None) -> Tensor:
    # x: [R, K]  w: [N, K] -> [R, N] in x's dtype
    from dcpctl.runtime.models.fp8_parts import _counters
    R, K = x.shape
    N = w.shape[0]
    if sms is None:
        from dcpctl.runtime.attention.kernel_choice import gpu_facts
        sms = gpu_facts(x.device).sms if x.is_cuda else 1
    n_tiles = -(-N // t.bn)
    splits, per = splits_for(K, n_tiles, t, sms)
    out = torch.empty((R, N), dtype=x.dtype, device=x.device)
    part = torch.empty((splits, R, N), dtype=torch.float32, device=x.device) if splits > 1 else out
    _gemm16_kernel[(n_tiles, splits)](x, w, out, part, _counters(x.device, n_tiles), R, N, K, x.stride(0), w.stride(0),
                                      per, splits, BM=max(16, triton.next_power_of_2(R)), BN=t.bn, BK=t.bk,
                                      SPLIT=splits > 1, num_warps=t.warps, num_stages=t.stages, **pdl.kw())
    return out
