"""The local MLA decode kernel's time per layer: the GPU's measured attention table, else the roofline.

    attention_s(cell, kv_dtype, backend, hw, k)  -> (seconds per layer call, label, source)

The measured table (dcpctl/tuning/attention, the same one `local_attention_backend` reads) times each backend
per (kernel heads, batch, local context) on one GPU. A cell between measured ones takes the measured time's
ratio to the roofline of plan/cost.py (max(KV + q/o bytes / HBM, FLOPs / bf16 rate)), interpolated in log2 of
heads, batch and context and held at the table's edges, times the cell's own roofline: exact on measured
cells, smooth between, and scaling with bytes and FLOPs past the edges. FP8 KV (the table has bf16 cells only)
takes the bf16 ratio on the FP8 roofline (derived); a page size the table did not time takes its cells at
another (the kernels read rows alike). A GPU without a table, or a backend the table did not time, is the
roofline over the calibrated efficiency (cost.py), else over aiconfigurator's 0.8 plus 3 us (assumed).
"""
from __future__ import annotations

import bisect
import functools
import math

from dcpctl.plan import attention_names, attention_table
from dcpctl.plan.cost import ACT_BYTES, Constants
from dcpctl.plan.hardware import Hardware
from dcpctl.plan.model import DTYPE_BYTES
from dcpctl.plan.perf_terms import AIC_BANDWIDTH, AIC_OP_S, AIC_SOURCE
from dcpctl.plan.perf_work import Attention

Grid = dict[tuple[int, int, int], float]   # (heads, batch, ctx) -> measured / roofline


def roofline_s(a: Attention, R: int, Lr: int, kv_bytes: int, hbm: float, flops: float) -> float:
    """cost.py's roofline of one kernel call: max(KV read + query in + latent out, FLOPs)."""
    read = a.batch * a.local_context * R * kv_bytes + a.batch * a.heads * (R + Lr) * ACT_BYTES
    return max(read / hbm, 2.0 * a.batch * a.heads * a.local_context * (R + Lr) / flops)


@functools.lru_cache(maxsize=16)
def _grid(device: str, sm: int, override: str | None, backend: str, page: int, R: int, Lr: int, hbm: float,
          flops: float) -> tuple[Grid, str]:
    table = attention_table.table_for(device, sm, override)
    mine = [c for c in table["cells"] if c["kv_dtype"] == "bf16" and c["us"].get(backend) is not None]
    pages = {c["page_size"] for c in mine}
    at = page if page in pages else max(pages, default=page)   # another page size: the kernel reads rows
                                                               # alike
    grid: Grid = {}
    for c in mine:
        us = c["us"][backend]
        if c["page_size"] != at:
            continue
        a = Attention(c["heads"], c["batch"], c["ctx"], 1)
        grid[(c["heads"], c["batch"], c["ctx"])] = us * 1e-6 / roofline_s(a, R, Lr, 2, hbm, flops)
    return grid, table["source"] + ("" if at == page else f", its page-{at} cells")


def _axis(values: list[int], x: float) -> list[tuple[int, float]]:
    """The one or two grid points around x with their weights (linear in log2; clamped at the ends)."""
    if x <= values[0]:
        return [(values[0], 1.0)]
    if x >= values[-1]:
        return [(values[-1], 1.0)]
    i = bisect.bisect_right(values, x)
    lo, hi = values[i - 1], values[i]
    t = (math.log2(x) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
    return [(lo, 1 - t), (hi, t)]


def interpolate(grid: Grid, heads: int, batch: int, ctx: int) -> float | None:
    """exp of the trilinear interpolation of log(ratio) over a full (heads x batch x ctx) grid; None if a
    corner the interpolation needs is missing."""
    hs = sorted({h for h, _, _ in grid})
    if not hs:
        return None
    acc = 0.0
    for h, wh in _axis(hs, heads):
        bs = sorted({b for hh, b, _ in grid if hh == h})
        for b, wb in _axis(bs, batch):
            cs = sorted({c for hh, bb, c in grid if hh == h and bb == b})
            for c, wc in _axis(cs, ctx):
                acc += wh * wb * wc * math.log(grid[(h, b, c)])
    return math.exp(acc)


def attention_s(a: Attention, R: int, Lr: int, kv_dtype: str, backend: str, page: int, hw: Hardware,
                k: Constants, override: str | None = None) -> tuple[float, str, str]:
    """(seconds of one layer's kernel call on the busiest rank, label, source)."""
    kvb = DTYPE_BYTES.get(kv_dtype, 2)
    roof = roofline_s(a, R, Lr, kvb, k.hbm_bytes_per_s, k.flops_per_s)
    if hw.device == "cuda" and backend in attention_names.MEASURED:
        grid, source = _grid(hw.gpu_name, hw.sm, override, backend, page, R, Lr, k.hbm_bytes_per_s,
                             k.flops_per_s)
        ratio = interpolate(grid, a.heads, max(a.batch, 1), max(a.local_context, 1)) if grid else None
        if ratio is not None:
            if kvb != 2:
                return (ratio * roof, "derived",
                        f"{source}: {backend}'s bf16-KV ratio to its roofline, on the {kv_dtype} roofline")
            exact = (a.heads, a.batch, a.local_context) in grid
            return ratio * roof, "measured" if exact else "derived", \
                f"{source}, {backend}" + ("" if exact else ", interpolated between its cells")
    if k.efficiency_by_heads or k.attn_efficiency != 1.0:
        eff = k.efficiency(a.heads)
        return k.attn_fixed_s + roof / eff, "derived", f"roofline / efficiency {eff:.2f} ({k.source})"
    return AIC_OP_S + roof / AIC_BANDWIDTH, "assumed", f"roofline ({k.source}); {AIC_SOURCE}"
