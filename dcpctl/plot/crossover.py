"""The crossover picture: modelled attention step time against concurrency, one panel per context length.

Input is `dcpctl.plan.series.crossover_series` (plain values). Colour is the DCP size, line style the
exchange backend; a curve ends (|) where its choice stops fitting, a grey band starts where DCP 1
stops fitting, a star marks where each DCP size starts to beat DCP 1, and a dotted line the
workload's --concurrency.
"""
from __future__ import annotations

import textwrap
from typing import Any

from dcpctl.plan.series import crossover_series
from dcpctl.plot.output import new_figure, save
from dcpctl.plot.style import log_axes, size_colour as _colour
STYLES = {("none", False): "-", ("ag_rs", False): ":", ("a2a", False): "--", ("a2a", True): "-.",
          ("fi_a2a", False): (0, (5, 1, 1, 1, 1, 1)), ("fi_a2a", True): "-"}
NO_FIT = "#d9d9d9"


def crossover_figure(series: dict[str, Any]) -> Any:
    """One small log-log panel per context length; the legend and the undrawn choices below them."""
    panels = series["panels"]
    cols = min(len(panels), 2)
    rows = -(-len(panels) // cols)
    width = 5.2 * cols if cols > 1 else 6.4
    fig = new_figure(width, 3.3 * rows + (1.3 if cols > 1 else 1.9), constrained=True)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, p in zip(axes, panels):
        _panel(ax, p, series)
    handles, labels = axes[0].get_legend_handles_labels()
    handles, labels = handles + _marks(), labels + [h.get_label() for h in _marks()]
    for ax in axes[len(panels):]:
        ax.axis("off")
    if len(panels) < len(axes):  # the empty slot holds the legend
        axes[-1].legend(handles, labels, loc="center", fontsize=8.5, frameon=False, title="choice")
    else:
        fig.legend(handles, labels, loc="outside lower center", ncol=4 if cols > 1 else 2, fontsize=8,
                   frameon=False)
    fig.suptitle(_caption(series, int(width * 15)), fontsize=9, x=0.01, ha="left", linespacing=1.4)
    return fig


def _marks() -> list[Any]:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    return [Line2D([], [], color="#555555", marker="|", markersize=9, markeredgewidth=2, linestyle="none",
                   label="curve ends: the choice fits no more"),
            Line2D([], [], color="#555555", marker="*", markersize=10, linestyle="none",
                   label="the DCP size starts to beat DCP 1"),
            Patch(color=NO_FIT, alpha=0.45, label="DCP 1 does not fit"),
            Line2D([], [], color="#444444", linestyle=(0, (1, 2)), label="--concurrency")]


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
        ax.axvspan(max(n1, 0.5) + 0.5 if n1 else 0.8, top * 1.3, color=NO_FIT, alpha=0.45, lw=0,
                   gid="dcp1-no-fit")
        ax.text(0.98, 0.03, f"DCP 1 does not fit\nabove {n1} requests", transform=ax.transAxes, ha="right",
                va="bottom", fontsize=7, color="#555555")
    _wins(ax, p)
    if chosen:
        ax.axvline(series["concurrency"], color="#444444", linestyle=(0, (1, 2)), linewidth=1.2)
    log_axes(ax, top, [ms for c in curves for _, ms in c["points"]])
    ax.set_title(f"context {p['context_len']:,}" + (f" (--context-len; --concurrency {series['concurrency']})"
                                                    if chosen else ""), fontsize=9,
                 weight="bold" if chosen else "normal")
    ax.set_xlabel("concurrent requests", fontsize=8)
    ax.set_ylabel("attention ms per decode step", fontsize=8)


def _wins(ax: Any, p: dict[str, Any]) -> None:
    """A star on each DCP size's earliest winning curve, and the list in the panel's corner."""
    lines = [p["past_positions"]] if p.get("past_positions") else []
    for w in [] if lines else p["wins"]:
        if w["from"] is None:
            lines.append(f"DCP {w['dcp']}: never beats DCP 1")
            continue
        curve = next(c for c in p["curves"] if c["choice"] == w["choice"])
        ms = dict(map(tuple, curve["points"])).get(w["from"])
        if ms is not None:
            ax.plot(w["from"], ms, marker="*", markersize=11, color=_colour(w["dcp"]),
                    markeredgecolor="white", markeredgewidth=0.6, zorder=5, gid="win-marker")
        lines.append(f"DCP {w['dcp']} wins from {w['from']} ({w['choice'].split(' ', 2)[2]})")
    if lines:
        ax.text(0.02, 0.97, "\n".join(lines), transform=ax.transAxes, ha="left", va="top", fontsize=7,
                bbox={"facecolor": "white", "edgecolor": "#cccccc", "alpha": 0.9,
                      "boxstyle": "round,pad=0.3"})


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
