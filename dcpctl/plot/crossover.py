"""The crossover picture: modelled attention step time against concurrency, one panel per context length.

Input is `dcpctl.plan.series.crossover_series` (plain values). Colour is the DCP size, line style the
exchange backend; a curve ends (|) where its choice stops fitting, a grey band starts where DCP 1
stops fitting, a star marks where each DCP size starts to beat DCP 1, and a dotted line the
workload's --concurrency.
"""
from __future__ import annotations

import math
import textwrap
from typing import Any

from dcpctl.plan.series import crossover_series
from dcpctl.plot.output import new_figure, save

SIZE_COLOURS = ["#222222", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf", "#e377c2"]
STYLES = {("none", False): "-", ("ag_rs", False): ":", ("a2a", False): "--", ("a2a", True): "-.",
          ("fi_a2a", True): "-"}
NO_FIT = "#d9d9d9"


def _colour(dcp: int) -> str:
    return SIZE_COLOURS[int(math.log2(dcp)) % len(SIZE_COLOURS)] if dcp & (dcp - 1) == 0 else \
        SIZE_COLOURS[dcp % len(SIZE_COLOURS)]


def crossover_figure(series: dict[str, Any]) -> Any:
    """One small log-log panel per context length; the legend and the undrawn choices below them."""
    panels = series["panels"]
    cols = min(len(panels), 2)
    rows = -(-len(panels) // cols)
    fig = new_figure(5.2 * cols, 3.3 * rows + 1.3, constrained=True)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, p in zip(axes, panels):
        _panel(ax, p, series)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(4, len(labels)), fontsize=8, frameon=False)
    fig.suptitle(_caption(series, int(5.2 * cols * 15)), fontsize=9, x=0.01, ha="left", linespacing=1.4)
    return fig


def _panel(ax: Any, p: dict[str, Any], series: dict[str, Any]) -> None:
    chosen = p["context_len"] == series["context_len"]
    curves = [c for c in p["curves"] if c["points"]]
    for c in curves:
        ns, ms = zip(*c["points"])
        ax.plot(ns, ms, color=_colour(c["dcp"]), linestyle=STYLES.get((c["backend"], c["replicate_q"]), "-"),
                linewidth=2.2 if c["dcp"] == 1 else 1.6, label=c["choice"], gid="choice-curve")
        ax.plot(ns[-1], ms[-1], marker="|", markersize=11, markeredgewidth=2, color=_colour(c["dcp"]))
    top = max([series["concurrency"], *(c["max_concurrency"] for c in curves)])
    n1 = p["dcp1_max_concurrency"]
    if n1 < top:
        ax.axvspan(max(n1, 0.5) + 0.5 if n1 else 0.8, top * 1.3, color=NO_FIT, alpha=0.45, lw=0, gid="dcp1-no-fit")
        ax.text(0.98, 0.03, f"DCP 1 does not fit\nabove {n1} requests", transform=ax.transAxes, ha="right",
                va="bottom", fontsize=7, color="#555555")
    _wins(ax, p)
    if chosen:
        ax.axvline(series["concurrency"], color="#444444", linestyle=(0, (1, 2)), linewidth=1.2)
    _axes(ax, top)
    ax.grid(True, which="major", color="#e6e6e6", linewidth=0.7)
    ax.set_title(f"context {p['context_len']:,}" + (f" (--context-len; --concurrency {series['concurrency']})"
                                                    if chosen else ""), fontsize=9,
                 weight="bold" if chosen else "normal")
    ax.set_xlabel("concurrent requests", fontsize=8)
    ax.set_ylabel("attention ms per decode step", fontsize=8)
    ax.tick_params(labelsize=7)


def _axes(ax: Any, top: int) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator
    ax.set_xscale("log", base=2)
    ax.set_xlim(0.8, top * 1.3)
    ax.xaxis.set_major_locator(LogLocator(base=2))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_ylim(bottom=0)


def _wins(ax: Any, p: dict[str, Any]) -> None:
    """A star on each DCP size's earliest winning curve, and the list in the panel's corner."""
    lines = []
    for w in p["wins"]:
        if w["from"] is None:
            lines.append(f"DCP {w['dcp']}: never beats DCP 1")
            continue
        curve = next(c for c in p["curves"] if c["choice"] == w["choice"])
        ms = dict(map(tuple, curve["points"])).get(w["from"])
        if ms is not None:
            ax.plot(w["from"], ms, marker="*", markersize=11, color=_colour(w["dcp"]), markeredgecolor="white",
                    markeredgewidth=0.6, zorder=5, gid="win-marker")
        lines.append(f"DCP {w['dcp']} wins from {w['from']} ({w['choice'].split(' ', 2)[2]})")
    if lines:
        ax.text(0.02, 0.97, "\n".join(lines), transform=ax.transAxes, ha="left", va="top", fontsize=7,
                bbox={"facecolor": "white", "edgecolor": "#cccccc", "alpha": 0.9, "boxstyle": "round,pad=0.3"})


def _caption(series: dict[str, Any], chars: int) -> str:
    skipped: dict[str, list[str]] = {}
    for c in series["panels"][0]["curves"]:
        if not c["valid"]:
            skipped.setdefault(c["note"], []).append(c["choice"])
    head = (f"{series['model']} on {series['hardware']}: modelled attention step time per choice "
            f"({series['constants']}); recommendation: {series['recommendation'] or 'none fits'}")
    notes = [f"not drawn ({why}): {', '.join(names)}" for why, names in skipped.items()]
    return "\n".join(textwrap.fill(line, chars) for line in [head, *notes])


def save_crossover(req: Any, k: Any, result: dict[str, Any], contexts: list[int], path: str) -> None:
    """Draw `recommend`'s result (with its crossovers) for these context lengths to path (.png or .svg)."""
    save(crossover_figure(crossover_series(req, k, result, contexts)), path)
