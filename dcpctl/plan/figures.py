"""The cost figures an estimate needs, where they came from, and the refusal when one is unknown.

    needed_figures(attn_tp)   memory bandwidth and bf16 rate always; link bandwidth and collective
                              latency when attention TP > 1 (the o_proj all-reduce, every DCP exchange)
    calibrated(hw, path)      hw with the figures a calibration file measured, each marked as such
    constants_for(hw, attn_tp, calibration)  the cost model's constants, or UnknownFigures
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from dcpctl.plan.cost import Constants, load_calibration
from dcpctl.plan.errors import UserError
from dcpctl.plan.hardware import FIGURES, Hardware

_SI = {"hbm_tbps": ("hbm_bytes_per_s", 1e12), "bf16_tflops": ("flops_per_s", 1e12),
       "link_gbps": ("link_bytes_per_s", 1e9), "coll_latency_us": ("coll_latency_s", 1e-6)}
_MEASURED_BY = {"hbm_tbps": "kernel", "bf16_tflops": "kernel", "link_gbps": "exchange",
                "coll_latency_us": "exchange"}


class UnknownFigures(UserError):
    """The hardware lacks a figure the estimate needs (no profile matched and no calibration gave it)."""


def needed_figures(attn_tp: int) -> tuple[str, ...]:
    return FIGURES if attn_tp > 1 else ("hbm_tbps", "bf16_tflops")


def calibrated(hw: Hardware, path: Path) -> Hardware:
    """hw with the figures `path` (a `dcpctl bench ... --save-calibration` file) measured; the rest as they
    were."""
    k = load_calibration(path, Constants.from_hardware(hw))
    src = dict(k.sources)
    vals = {f: round(getattr(k, _SI[f][0]) / _SI[f][1], 6)
            for f in FIGURES if src[f].startswith("calibration")}
    return replace(hw, figures=tuple((f, src[f]) for f in FIGURES), **vals)


def require(hw: Hardware, attn_tp: int) -> None:
    """UnknownFigures naming what is missing, why, and how to get it."""
    missing = [f for f in needed_figures(attn_tp) if not getattr(hw, f)]
    if not missing:
        return
    why = hw.figure_source(missing[0]).removeprefix("unknown: ")
    benches = " and ".join(f"`dcpctl bench {b} --save-calibration FILE`"
                           for b in dict.fromkeys(_MEASURED_BY[f] for f in missing))
    raise UnknownFigures(f"the cost figures {', '.join(missing)} of {hw.gpu_name} (hardware {hw.name}) are "
                         f"unknown ({why}): pass --hardware with a profile or YAML file that has them, or "
                         f"--calibration with the file {benches} writes")


def constants_for(hw: Hardware, attn_tp: int, calibration: str | Path | None = None) -> Constants:
    """The cost model's constants for hw (already `calibrated` or not) and an optional calibration file."""
    require(hw, attn_tp)
    k = Constants.from_hardware(hw)
    return load_calibration(Path(calibration), k) if calibration else k
