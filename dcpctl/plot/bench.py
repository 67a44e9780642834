"""The `bench decode --picture` picture: measured decode step time against context, one panel per batch.

Input is the bench decode document (`{"args", "shape", "rows"}`, as `--format json` and `-o` write it).
One colour per DCP size: the measured forward time (solid, dots), the CUDA-graph replay when measured
(dash-dot, squares) and the roofline prediction when there is one (dashed, CUDA only).
"""
from __future__ import annotations

from typing import Any

from dcpctl.plot.output import new_figure, save
from dcpctl.plot.style import log_axes, size_colour

SERIES = (("step_ms", "measured", "-", "o"), ("graph_ms", "CUDA graph", "-.", "s"),
          ("predicted_ms", "predicted", "--", None))


def decode_figure(doc: dict[str, Any]) -> Any:
    """One panel per batch size: step time against context for each DCP size, measured and predicted."""
    rows, a = doc["rows"], doc["args"]
    batches = sorted({r["batch"] for r in rows})
    cols = min(len(batches), 2)
    fig = new_figure(5.2 * cols if cols > 1 else 6.4, 3.3 * -(-len(batches) // cols) + 1.2, constrained=True)
    axes = fig.subplots(-(-len(batches) // cols), cols, squeeze=False).ravel()
    for ax, b in zip(axes, batches):
        _panel(ax, [r for r in rows if r["batch"] == b], b)
    for ax in axes[len(batches):]:
        ax.axis("off")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 4), fontsize=8,
               frameon=False)
    fig.suptitle(f"bench decode: shape {doc['shape']}, tp {a['tp']}, {a['backend']}"
                 f"{' +repQ' if a.get('replicate_q') else ''}, {a['dtype']} on {a['device']}, "
                 f"{a['steps']} timed steps per cell", fontsize=9, x=0.01, ha="left")
    return fig


def _panel(ax: Any, rows: list[dict[str, Any]], batch: int) -> None:
    ys: list[float] = []
    for dcp in sorted({r["dcp"] for r in rows}):
        cells = sorted((r for r in rows if r["dcp"] == dcp), key=lambda r: r["context"])
        for key, what, style, marker in SERIES:
            pts = [(r["context"], r[key]) for r in cells if r.get(key)]
            if not pts:
                continue
            xs, vs = zip(*pts)
            ax.plot(xs, vs, color=size_colour(dcp), linestyle=style, marker=marker, markersize=4,
                    linewidth=1.6, label=f"dcp {dcp} {what}", gid=f"bench-{key}")
            ys += vs
    log_axes(ax, max(r["context"] for r in rows), ys)
    ax.set_xlim(min(r["context"] for r in rows) / 1.3, max(r["context"] for r in rows) * 1.3)
    ax.set_title(f"batch {batch}", fontsize=9)
    ax.set_xlabel("cached context per request (tokens)", fontsize=8)
    ax.set_ylabel("ms per decode step", fontsize=8)


def save_decode(doc: dict[str, Any], path: str) -> None:
    """Draw the bench decode document to path (.png or .svg)."""
    save(decode_figure(doc), path)
