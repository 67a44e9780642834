"""The plan's hardware section as a table: what was detected or named, and where each cost figure came
from."""
from __future__ import annotations

from typing import Any

from rich.markup import escape

from dcpctl import console
from dcpctl.plan.hardware import FIGURES, Hardware

_UNITS = {"hbm_tbps": ("memory bandwidth", "TB/s"), "bf16_tflops": ("bf16 rate", "TFLOP/s"),
          "link_gbps": ("link bandwidth", "GB/s"), "coll_latency_us": ("collective latency", "us")}


def _links(hw: Hardware) -> str:
    if not hw.nvlink:
        return "none"
    peers = f" to {hw.nvlink_peers} other GPU(s)" if hw.nvlink_peers else ""
    return f"yes{peers}"


def _fabric(hw: Hardware) -> str:
    if not hw.fabric_state:
        return "yes (by GPU name)" if hw.mnnvl else "no"
    return (f"{'yes' if hw.mnnvl else 'no'} (fabric {hw.fabric_state}, cluster UUID "
            f"{hw.cluster_uuid or 'none'})")


def hardware_rows(hw: Hardware) -> list[list[Any]]:
    rows: list[list[Any]] = [["GPU", f"{hw.gpus_per_node}x {hw.gpu_name}, {hw.memory_gib} GiB, sm {hw.sm}",
                              hw.source]]
    if len(hw.gpu_models) > 1:
        rows.append(["mixed models", ", ".join(f"{c}x {n}" for n, c in hw.gpu_models),
                     "memory and sm above are the smallest of them"])
    rows += [["NVLink", _links(hw), ""], ["MNNVL", _fabric(hw), ""]]
    if hw.profile:
        rows.append(["profile", *hw.profile.split(": ", 1)])
    for f in FIGURES:
        label, unit = _UNITS[f]
        value = getattr(hw, f)
        rows.append([label, f"{value:g} {unit}" if value else "unknown",
                     hw.figure_source(f).removeprefix("unknown: ")])
    return [[escape(str(c)) for c in r] for r in rows]


def render_hardware(hw: Hardware) -> None:
    console.out.print(console.table(f"Hardware: {hw.name}", ["", "value", "from"], hardware_rows(hw)))
