"""Hardware: built-in profiles, YAML files, or this machine as `dcpctl.plan.detect` probed it.

Performance figures (FIGURES) are never invented: each is a profile's or a file's, measured
(NVML's link speed, a calibration file), or unknown (0 here, null in JSON), and `figures` says
which. A detected GPU takes the figures of the built-in profile whose GPU it is (`match_profile`:
the same name, or that name plus an SXM suffix, and memory within 5%); mixed GPU models on one
node are reported (`gpu_models`), never averaged, and take no profile's figures.
"""
from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from dcpctl.plan.detect import Probe, probe
from dcpctl.plan.errors import UserError

FIGURES = ("hbm_tbps", "bf16_tflops", "link_gbps", "coll_latency_us")
MEMORY_MATCH = 0.05   # a detected GPU is a profile's GPU within this fraction of its memory


@dataclass(frozen=True)
class Hardware:
    name: str
    device: str  # "cuda" or "cpu"
    gpu_name: str
    gpus_per_node: int
    memory_gib: float  # per GPU (or per host for cpu); the smallest GPU's on a mixed node
    sm: int  # compute capability * 10 (90 = Hopper, 100 = Blackwell); 0 on CPU; the lowest on a mixed node
    nvlink: bool
    mnnvl: bool
    hbm_tbps: float = 0.0  # memory bandwidth per GPU, TB/s (0: unknown)
    link_gbps: float = 0.0  # per-GPU interconnect bandwidth inside an NVLink domain, GB/s (one direction)
    bf16_tflops: float = 0.0
    coll_latency_us: float = 0.0  # one small collective inside a captured decode step (profiles: assumed 15)
    source: str = "profile"
    profile: str = ""  # detected hardware: the built-in profile whose figures apply, and why (or why none)
    figures: tuple[tuple[str, str], ...] = ()  # (figure, where its value came from)
    gpu_models: tuple[tuple[str, int], ...] = ()  # detected (model, count); more than one: a mixed node
    nvlink_peers: int = 0  # detected: other GPUs GPU 0 reaches over NVLink (0 also when unknown)
    fabric_state: str = ""  # detected NVML GPU fabric state
    cluster_uuid: str = ""

    @property
    def is_sm100(self) -> bool:
        return self.sm // 10 == 10

    def figure_source(self, figure: str) -> str:
        return dict(self.figures).get(figure, "unknown")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update({f: d[f] or None for f in FIGURES})
        d["figures"] = {f: self.figure_source(f) for f in FIGURES}
        d["gpu_models"] = [{"name": n, "count": c} for n, c in self.gpu_models]
        return d


_DERIVED = {"figures", "gpu_models"}
_FIELDS = set(Hardware.__dataclass_fields__) - _DERIVED


def hardware_from_dict(d: dict[str, Any], source: str) -> Hardware:
    unknown = sorted(set(d) - _FIELDS)
    if unknown:
        raise UserError(f"{source}: unknown hardware field(s) {unknown}; known: {sorted(_FIELDS)}")
    missing = [k
               for k in ("name", "device", "gpu_name", "gpus_per_node", "memory_gib", "sm", "nvlink", "mnnvl")
               if k not in d]
    if missing:
        raise UserError(f"{source}: missing hardware field(s) {missing}")
    for k in ("gpus_per_node", "sm"):
        if not isinstance(d[k], int) or isinstance(d[k], bool) or d[k] < (1 if k == "gpus_per_node" else 0):
            raise UserError(f"{source}: hardware field {k} must be a "
                            f"{'positive' if k == 'gpus_per_node' else 'non-negative'} integer, got {d[k]!r}")
    for k in ("memory_gib", *FIGURES):
        if k in d and (not isinstance(d[k], (int, float)) or isinstance(d[k], bool) or not math.isfinite(d[k])
                       or d[k] < 0 or (k == "memory_gib" and d[k] == 0)):
            raise UserError(f"{source}: hardware field {k} must be a positive finite number, got {d[k]!r}")
    if d["device"] not in ("cuda", "cpu"):
        raise UserError(f"{source}: hardware field device must be cuda or cpu, got {d['device']!r}")
    try:
        hw = Hardware(**{**d, "source": d.get("source", source)})
    except TypeError as e:
        raise UserError(f"{source}: {e}") from None
    return replace(hw, figures=tuple((f, source if getattr(hw, f) else f"unknown: {source} does not give it")
                                     for f in FIGURES))


# ---- detected hardware ---------------------------------------------------------------------

def _cpu() -> Hardware:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30 if hasattr(os, "sysconf") else 16.0
    why = "unknown: no GPU found, NVML, nvidia-smi and torch report none"
    return Hardware("cpu", "cpu", "cpu", 1, round(mem, 1), 0, False, False, source="detected: cpu",
                    profile="none: no GPU", figures=tuple((f, why) for f in FIGURES))


def _name_is_mnnvl(name: str) -> bool:
    """GB200/GB300 systems are NVL72 racks: SGLang treats them as MNNVL by name."""
    return "GB200" in name.upper() or "GB300" in name.upper()


def match_profile(gpu_name: str, memory_gib: float,
                  profiles: dict[str, dict[str, Any]]) -> tuple[str | None, str]:
    """The built-in profile whose GPU this is (same name, or the name plus an SXM suffix, and memory within
    MEMORY_MATCH), and why; (None, why not) otherwise."""
    near = []
    for pname, p in sorted(profiles.items()):
        if p.get("device") != "cuda":
            continue
        if gpu_name == p["gpu_name"] or gpu_name.startswith(p["gpu_name"] + " SXM"):
            if abs(memory_gib - p["memory_gib"]) <= MEMORY_MATCH * p["memory_gib"]:
                return pname, f"{gpu_name} with {memory_gib} GiB is profile {pname}'s GPU"
            near.append(f"profile {pname} has {p['memory_gib']} GiB")
    return (None,
            f"no built-in profile has {gpu_name} with {memory_gib} GiB"
            + (f" ({'; '.join(near)})" if near else ""))


def from_probe(found: Probe | None, profiles: dict[str, dict[str, Any]]) -> Hardware:
    """`--hardware auto`: the probed machine, with the figures of the profile that matches its GPUs."""
    if found is None:
        return _cpu()
    models = Counter(g.name for g in found.gpus)
    first = found.gpus[0].name
    gpu_name = first if len(models) == 1 else "mixed: " + ", ".join(f"{c}x {n}" for n, c in models.items())
    memory, n = min(g.memory_gib for g in found.gpus), len(found.gpus)
    hw = Hardware(f"detected-{n}x", "cuda", gpu_name, n, memory, min(g.sm for g in found.gpus), found.nvlink,
                  any(_name_is_mnnvl(m) for m in models) or found.mnnvl, source=f"detected: {found.via}",
                  gpu_models=tuple(models.items()), nvlink_peers=found.nvlink_peers,
                  fabric_state=found.fabric_state, cluster_uuid=found.cluster_uuid)
    if len(models) > 1:
        pname, why = None, "mixed GPU models on this node: no one profile's figures apply"
    else:
        pname, why = match_profile(first, memory, profiles)
    return _with_figures(hw, found, pname, profiles.get(pname or "", {}), why)


def _with_figures(hw: Hardware, found: Probe, pname: str | None, prof: dict[str, Any], why: str) -> Hardware:
    vals = {f: float(prof.get(f, 0.0)) for f in FIGURES}
    srcs = {f: f"profile {pname}" if vals[f] else f"unknown: {why}" for f in FIGURES}
    if found.links and found.link_speed_gbps:
        vals["link_gbps"] = round(found.links * found.link_speed_gbps, 1)
        srcs["link_gbps"] = f"{found.via}: {found.links} active NVLinks x {found.link_speed_gbps:g} GB/s"
    elif not hw.nvlink:
        vals["link_gbps"], srcs["link_gbps"] = 0.0, "unknown: no NVLink on this node (PCIe is not modelled)"
    return replace(hw, profile=f"{pname}: {why}" if pname else f"none: {why}",
                   figures=tuple(srcs.items()), **vals)


def resolve_hardware(value: str, profiles: dict[str, dict[str, Any]]) -> Hardware:
    """`auto` (the probed machine), a built-in profile name, or a YAML file path."""
    if value == "auto":
        return from_probe(probe(), profiles)
    if value in profiles:
        return hardware_from_dict(profiles[value], f"profile {value}")
    if value.endswith((".yaml", ".yml")) or Path(value).exists():
        from dcpctl.plan.yamlio import read_yaml
        data = read_yaml(Path(value))
        return hardware_from_dict(data.get("hardware", data), f"file {value}")
    raise UserError(f"unknown hardware {value!r}; use auto, a YAML file, or one of: "
                    f"{', '.join(sorted(profiles))}")
