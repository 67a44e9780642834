"""The rank map picture: nodes as rows of GPU cells, coloured by DCP group, outlined by attention-DP replica.

Input is the plan document (`Plan.to_dict()`, the `--format json` contract), so a saved plan draws the same.
A DCP group that leaves its node gets a marked edge (blue dashed on an MNNVL fabric, where that is fine;
red where the exchange leaves NVLink); the DCP groups of a `dcp_containment` / `tp_dcp` violation are
drawn in the violation colour and every violation is named in the caption.
"""
from __future__ import annotations

import textwrap
from typing import Any

from dcpctl.plan.errors import UserError
from dcpctl.plot.output import new_figure, save

MAX_CELLS = 1024
INCH = 0.62  # inches per GPU cell
MIN_WIDTH_IN = 6.8  # room for the caption and the legend
PER_LINE = 16  # GPU cells per line; a larger node wraps onto more lines of its band
CELL, GAP, NODE_GAP = 1.0, 0.12, 0.55
PALETTE = ["#8dd3c7", "#bebada", "#80b1d3", "#fdb462", "#b3de69", "#fccde5", "#bc80bd", "#ccebc5", "#ffed6f",
           "#a6cee3", "#b2df8a", "#cab2d6"]  # no red: red is the violation colour
VIOLATION = "#e34a33"
UNGROUPED = "#e0e0e0"
FABRIC_EDGE, NETWORK_EDGE = "#1f5fbf", "#c0001a"
GROUP_VIOLATIONS = ("dcp_containment", "tp_dcp")  # violations that name DCP groups


def _index(groups: list[list[int]]) -> dict[int, int]:
    return {r: i for i, g in enumerate(groups) for r in g}


def offending_dcp_groups(doc: dict[str, Any]) -> set[int]:
    """Indices of the DCP groups a group violation is about: those not inside one attention-TP group."""
    if not any(v["code"] in GROUP_VIOLATIONS for v in doc["violations"]) or not doc["groups"]:
        return set()
    total, attn_tp = doc["topology"]["total_gpus"], _index(doc["groups"]["attn_tp"])
    return {i for i, g in enumerate(doc["groups"]["dcp"])
            if any(r >= total for r in g) or len({attn_tp[r] for r in g}) > 1}


class _Grid:
    """Where rank r sits: node band, line inside it, column; y grows downwards (drawn negated)."""

    def __init__(self, total: int, per_node: int) -> None:
        self.per_node, self.per_line = per_node, min(per_node, PER_LINE)
        self.lines = -(-per_node // self.per_line)
        self.nodes = -(-total // per_node)

    def node(self, r: int) -> int:
        return r // self.per_node

    def xy(self, r: int) -> tuple[float, float]:
        line, col = divmod(r % self.per_node, self.per_line)
        top = self.node(r) * (self.lines * CELL + NODE_GAP) + NODE_GAP + line * CELL
        return col * CELL, -(top + CELL)  # lower-left corner

    @property
    def size(self) -> tuple[float, float]:
        return self.per_line * CELL, self.nodes * (self.lines * CELL + NODE_GAP)


def rank_map_figure(doc: dict[str, Any]) -> Any:
    """The plan document's rank map as a matplotlib Figure."""
    t = doc["topology"]
    if t["total_gpus"] > MAX_CELLS:
        raise UserError(f"the rank map picture draws at most {MAX_CELLS} GPUs and this plan has "
                        f"{t['total_gpus']}; --format json lists every rank")
    grid = _Grid(t["total_gpus"], t["ranks_per_node"])
    caption = _caption(doc)
    fig, ax = _canvas(grid, caption.count("\n") + 1)
    _cells(ax, doc, grid)
    crossings = 0
    if doc["groups"]:
        _replicas(ax, doc["groups"]["attn_dp"], doc["topology"], grid)
        crossings = _node_edges(ax, doc, grid)
    for n in range(grid.nodes):
        x, y = grid.xy(n * grid.per_node)
        ax.text(-0.4, y + CELL / 2, f"node {n}", ha="right", va="center", fontsize=9, color="#333333")
    fig.text(0.15 / fig.get_figwidth(), 1 - 0.12 / fig.get_figheight(), caption, ha="left", va="top",
             fontsize=8.5, color="#111111" if doc["valid"] else VIOLATION, linespacing=1.4)
    _legend(fig, doc, crossings > 0)
    return fig


def _canvas(grid: _Grid, caption_lines: int) -> tuple[Any, Any]:
    """A figure sized in inches from the grid (INCH per cell), the caption above and the legend below."""
    width, height = grid.size
    left, top, bottom = 1.05, 0.25 + 0.2 * caption_lines, 0.75
    fig_w = max(MIN_WIDTH_IN, left + INCH * width + 0.3)
    fig_h = top + INCH * height + bottom
    x0 = max(left, (fig_w - INCH * width) / 2)
    fig = new_figure(fig_w, fig_h)
    ax = fig.add_axes((x0 / fig_w, bottom / fig_h, INCH * width / fig_w, INCH * height / fig_h))
    ax.set_xlim(0, width)
    ax.set_ylim(-height, 0)
    ax.axis("off")
    return fig, ax


def _cells(ax: Any, doc: dict[str, Any], grid: _Grid) -> None:
    from matplotlib.patches import Rectangle
    groups = doc["groups"].get("dcp", []) if doc["groups"] else []
    dcp, bad = _index(groups), offending_dcp_groups(doc)
    for r in range(doc["topology"]["total_gpus"]):
        x, y = grid.xy(r)
        g = dcp.get(r)
        colour = UNGROUPED if g is None else VIOLATION if g in bad else PALETTE[g % len(PALETTE)]
        ax.add_patch(Rectangle((x + GAP / 2, y + GAP / 2), CELL - GAP, CELL - GAP, facecolor=colour,
                               edgecolor="#555555", linewidth=0.6, hatch="///" if g in bad else None,
                               gid="gpu-cell-violation" if g in bad else "gpu-cell"))
        text = "white" if g in bad else "#111111"
        ax.text(x + CELL / 2, y + CELL * 0.6, str(r), ha="center", va="center", fontsize=10, weight="bold",
                color=text)
        if g is not None:
            ax.text(x + CELL / 2, y + CELL * 0.27, f"G{g}.{groups[g].index(r)}", ha="center", va="center",
                    fontsize=6.5, color=text)


def _runs(ranks: list[int], grid: _Grid) -> list[list[int]]:
    """Split sorted ranks into runs that sit side by side on one line of one node band."""
    runs: list[list[int]] = []
    for r in sorted(ranks):
        if runs and r == runs[-1][-1] + 1 and grid.xy(r)[1] == grid.xy(runs[-1][-1])[1]:
            runs[-1].append(r)
        else:
            runs.append([r])
    return runs


def _replica_name(i: int, t: dict[str, Any]) -> str:
    """attn-DP i inside one engine; with whole-engine replicas (dp without attention DP) the engine too."""
    engine, a = divmod(i, t["attn_dp_size"])
    if t["total_gpus"] == t["world_size"]:
        return f"attn-DP {a}"
    return f"engine {engine}" + (f", attn-DP {a}" if t["attn_dp_size"] > 1 else "")


def _replicas(ax: Any, replicas: list[list[int]], t: dict[str, Any], grid: _Grid) -> None:
    from matplotlib.patches import FancyBboxPatch
    pad = GAP / 4
    for i, ranks in enumerate(replicas):
        for k, run in enumerate(_runs(ranks, grid)):
            x, y = grid.xy(run[0])
            ax.add_patch(FancyBboxPatch((x + pad, y + pad), len(run) * CELL - 2 * pad, CELL - 2 * pad,
                                        boxstyle="round,pad=0,rounding_size=0.12", fill=False,
                                        edgecolor="#222222",
                                        linewidth=2.2, gid="attn-dp-outline"))
            if k == 0:
                ax.text(x + 0.1, y + CELL + 0.03, _replica_name(i, t), ha="left", va="bottom", fontsize=7,
                        color="#222222", weight="bold")


def _node_edges(ax: Any, doc: dict[str, Any], grid: _Grid) -> int:
    """A connector through the gap between node bands wherever a DCP group continues on another node."""
    colour, style = (FABRIC_EDGE, (0, (2.5, 1.2))) if doc["hardware"]["mnnvl"] else (NETWORK_EDGE, "-")
    total, out, drawn = doc["topology"]["total_gpus"], 0.22, 0
    for g in doc["groups"]["dcp"]:
        ranks = sorted(r for r in g if r < total)
        for a, b in zip(ranks, ranks[1:]):
            if grid.node(a) == grid.node(b):
                continue
            (xa, ya), (xb, yb) = grid.xy(a), grid.xy(b)
            gap_y = ya - NODE_GAP / 2 + 0.02
            xs = [xa + CELL, xa + CELL + out, xa + CELL + out, xb - out, xb - out, xb]
            ys = [ya + CELL / 2, ya + CELL / 2, gap_y, gap_y, yb + CELL / 2, yb + CELL / 2]
            ax.plot(xs, ys, color=colour, linewidth=2.4, linestyle=style, clip_on=False, zorder=5,
                    gid="node-edge")
            ax.plot([xs[0], xs[-1]], [ys[0], ys[-1]], linestyle="none", marker="o", markersize=4.5,
                    color=colour, clip_on=False, zorder=6)
            drawn += 1
    return drawn


def _caption(doc: dict[str, Any]) -> str:
    t, hw = doc["topology"], doc["hardware"]
    pp = f", PP {t['pp_size']}" if t["pp_size"] > 1 else ""
    engines = t["total_gpus"] // t["world_size"] if t["world_size"] else 1
    pp += f", {engines} whole-engine replicas (DP {t['dp_size']} without attention DP)" if engines > 1 else ""
    model = doc["model"]["name"] if doc.get("model") else "topology only (no model)"
    head = (f"{model} on {hw['name']}: TP {t['tp_size']}, attention DP {t['attn_dp_size']} "
            f"(attn_tp {t['attn_tp_size']}), DCP {t['dcp_size']}, EP {t['ep_size']}{pp}; {t['total_gpus']} "
            f"GPUs on {t['nnodes']} node(s), {t['ranks_per_node']} per node")
    chars = int(max(MIN_WIDTH_IN, INCH * min(t["ranks_per_node"], PER_LINE) + 1.25) * 14)  # at 8.5 pt
    lines = [f"{'VALID' if doc['valid'] else 'INVALID'}: {head}"]
    lines += [f"{v['code']}: {v['message']}" for v in doc["violations"]]
    return "\n".join(textwrap.fill(line, chars) for line in lines)


def _legend(fig: Any, doc: dict[str, Any], crossings: bool) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    handles = [Patch(facecolor=PALETTE[0], edgecolor="#555555", label="GPU: rank, G<DCP group>.<DCP rank>"),
               Patch(fill=False, edgecolor="#222222", linewidth=2.2, label="attention-DP replica")]
    if offending_dcp_groups(doc):
        handles.append(Patch(facecolor=VIOLATION, hatch="///", edgecolor="#555555",
                             label="DCP group of the violation"))
    if crossings and doc["hardware"]["mnnvl"]:
        handles.append(Line2D([], [], color=FABRIC_EDGE, linewidth=2.4, linestyle=(0, (2.5, 1.2)),
                              label="DCP group leaves its node (stays on the MNNVL fabric)"))
    elif crossings:
        handles.append(Line2D([], [], color=NETWORK_EDGE, linewidth=2.4,
                              label="DCP group leaves its node and NVLink domain"))
    fig.legend(handles=handles, loc="lower center", ncol=2, fontsize=7.5, frameon=False)


def save_rank_map(doc: dict[str, Any], path: str) -> None:
    """Draw the plan document's rank map to path (.png or .svg)."""
    save(rank_map_figure(doc), path)
