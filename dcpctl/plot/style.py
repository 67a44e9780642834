"""Shared look of the line pictures: one colour per DCP size, log axes with plain-number ticks."""
from __future__ import annotations

import math
from typing import Any

SIZE_COLOURS = ["#222222", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf", "#e377c2"]


def size_colour(dcp: int) -> str:
    """DCP 1 black, then 2, 4, 8, ... in a fixed order (other sizes by value)."""
    i = int(math.log2(dcp)) if dcp & (dcp - 1) == 0 else dcp
    return SIZE_COLOURS[i % len(SIZE_COLOURS)]


def log_ticks(lo: float, hi: float) -> list[float]:
    """At least four readable ticks on a log axis: 1-2-5 steps, finer when the range is under a decade."""
    ticks: list[float] = []
    for subs in ((1, 2, 5), (1, 1.5, 2, 3, 4, 5, 7),
                 (1, 1.2, 1.4, 1.6, 1.8, 2, 2.5, 3, 3.5, 4, 4.5, 5, 6, 7, 8, 9)):
        ticks = [m * 10.0 ** e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
                 for m in subs if lo <= m * 10.0 ** e <= hi]
        if len(ticks) >= 4:
            break
    return ticks


def log_axes(ax: Any, x_top: float, ys: list[float]) -> None:
    """x: log2 from 1 to a little past x_top, integer labels; y: log10 over ys, plain-number labels."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator
    ax.set_xscale("log", base=2)
    ax.set_xlim(0.8, x_top * 1.3)
    ax.xaxis.set_major_locator(LogLocator(base=2))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_yscale("log")
    if not ys:   # nothing fits (every choice invalid): an empty panel, the caption says why
        ys = [1.0, 10.0]
    ax.yaxis.set_major_locator(FixedLocator(log_ticks(min(ys), max(ys))))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.grid(True, which="major", color="#e6e6e6", linewidth=0.7)
    ax.tick_params(labelsize=7)
