"""Hardware: built-in profiles, YAML files, or detection of this machine (memoized, injectable).

Detection order: NVML (nvidia-ml-py) when installed, else `nvidia-smi`, else torch if it is already
imported (never imported here), else CPU. MNNVL = NVML fabric state completed and a non-zero cluster
UUID (a 2x H200 NVLink box reads Completed with a zero UUID: not MNNVL).
"""
from __future__ import annotations

import functools
import math
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from dcpctl.plan.errors import UserError


@dataclass(frozen=True)
class Hardware:
    name: str
    device: str  # "cuda" or "cpu"
    gpu_name: str
    gpus_per_node: int
    memory_gib: float  # per GPU (or per host for cpu)
    sm: int  # compute capability * 10 (90 = Hopper, 100 = Blackwell); 0 on CPU
    nvlink: bool
    mnnvl: bool
    hbm_tbps: float = 0.0  # memory bandwidth per GPU, TB/s
    link_gbps: float = 0.0  # per-GPU interconnect bandwidth inside an NVLink domain, GB/s (one direction)
    bf16_tflops: float = 0.0
    coll_latency_us: float = 15.0  # one small collective inside a captured decode step (assumed; calibrate)
    source: str = "profile"

    @property
    def is_sm100(self) -> bool:
        return self.sm // 10 == 10

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_FIELDS = set(Hardware.__dataclass_fields__)


def hardware_from_dict(d: dict[str, Any], source: str) -> Hardware:
    unknown = sorted(set(d) - _FIELDS)
    if unknown:
        raise UserError(f"{source}: unknown hardware field(s) {unknown}; known: {sorted(_FIELDS)}")
    missing = [k for k in ("name", "device", "gpu_name", "gpus_per_node", "memory_gib", "sm", "nvlink", "mnnvl")
               if k not in d]
    if missing:
        raise UserError(f"{source}: missing hardware field(s) {missing}")
    for k in ("gpus_per_node", "sm"):
        if not isinstance(d[k], int) or isinstance(d[k], bool) or d[k] < (1 if k == "gpus_per_node" else 0):
            raise UserError(f"{source}: hardware field {k} must be a {'positive' if k == 'gpus_per_node' else 'non-negative'}"
                            f" integer, got {d[k]!r}")
    for k in ("memory_gib", "hbm_tbps", "link_gbps", "bf16_tflops", "coll_latency_us"):
        if k in d and (not isinstance(d[k], (int, float)) or isinstance(d[k], bool) or not math.isfinite(d[k])
                       or d[k] < 0 or (k == "memory_gib" and d[k] == 0)):
            raise UserError(f"{source}: hardware field {k} must be a positive finite number, got {d[k]!r}")
    if d["device"] not in ("cuda", "cpu"):
        raise UserError(f"{source}: hardware field device must be cuda or cpu, got {d['device']!r}")
    try:
        return Hardware(**{**d, "source": d.get("source", source)})
    except TypeError as e:
        raise UserError(f"{source}: {e}") from None


# ---- detection -----------------------------------------------------------------------------

def _cpu() -> Hardware:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30 if hasattr(os, "sysconf") else 16.0
    return Hardware("cpu", "cpu", "cpu", 1, round(mem, 1), 0, False, False, source="detected: cpu")


def _detect_nvml(nvml: Any) -> Hardware | None:
    try:
        nvml.nvmlInit()
    except Exception:
        return None
    try:
        count = nvml.nvmlDeviceGetCount()
        if count == 0:
            return None
        h = nvml.nvmlDeviceGetHandleByIndex(0)
        name = nvml.nvmlDeviceGetName(h)
        name = name.decode() if isinstance(name, bytes) else name
        mem = nvml.nvmlDeviceGetMemoryInfo(h).total / 2**30
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(h)
        return Hardware(f"detected-{count}x", "cuda", name, count, round(mem, 1), major * 10 + minor,
                        _nvml_nvlink(nvml, h), _name_is_mnnvl(name) or _nvml_mnnvl(nvml, h), source="detected: nvml")
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def _nvml_nvlink(nvml: Any, h: Any) -> bool:
    try:
        return bool(nvml.nvmlDeviceGetNvLinkState(h, 0))
    except Exception:
        return False


def _name_is_mnnvl(name: str) -> bool:
    """GB200/GB300 systems are NVL72 racks: SGLang treats them as MNNVL by name."""
    return "GB200" in name.upper() or "GB300" in name.upper()


def _nvml_mnnvl(nvml: Any, h: Any) -> bool:
    try:
        info = nvml.nvmlDeviceGetGpuFabricInfo(h)
    except Exception:
        return False
    completed = getattr(nvml, "NVML_GPU_FABRIC_STATE_COMPLETED", 3)
    uuid = bytes(getattr(info, "clusterUuid", b"") or b"")
    return info.state == completed and any(uuid)


def _detect_smi(run: Callable[[list[str]], str]) -> Hardware | None:
    try:
        rows = run(["nvidia-smi", "--query-gpu=name,memory.total,compute_cap", "--format=csv,noheader,nounits"])
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [r for r in rows.strip().splitlines() if r.strip()]
    if not lines:
        return None
    name, mem_mib, cap = [x.strip() for x in lines[0].split(",")]
    major, minor = (int(x) for x in cap.split("."))
    query = _smi_or_empty(run, ["nvidia-smi", "-q", "-i", "0"])
    links = _smi_or_empty(run, ["nvidia-smi", "nvlink", "--status", "-i", "0"])
    return Hardware(f"detected-{len(lines)}x", "cuda", name, len(lines), round(float(mem_mib) / 1024, 1),
                    major * 10 + minor, "GB/s" in links, _name_is_mnnvl(name) or _smi_mnnvl(query),
                    source="detected: nvidia-smi")


def _smi_or_empty(run: Callable[[list[str]], str], argv: list[str]) -> str:
    try:
        return run(argv)
    except (OSError, subprocess.SubprocessError):
        return ""


def _smi_mnnvl(query: str) -> bool:
    """`nvidia-smi -q` Fabric section: State Completed and a ClusterUUID that is not all zeros."""
    state, uuid = "", ""
    for line in query.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip().lower(), value.strip()
        if key == "state" and not state:
            state = value.lower()
        elif key in ("clusteruuid", "cluster uuid"):
            uuid = value
    return state == "completed" and bool(uuid.replace("0", "").replace("-", "").strip())


def _detect_torch(torch: Any) -> Hardware | None:
    if not torch.cuda.is_available():
        return None
    p = torch.cuda.get_device_properties(0)
    n = torch.cuda.device_count()
    return Hardware(f"detected-{n}x", "cuda", p.name, n, round(p.total_memory / 2**30, 1), p.major * 10 + p.minor,
                    n > 1, False, source="detected: torch")


def _run(argv: list[str]) -> str:
    if shutil.which(argv[0]) is None:
        raise FileNotFoundError(argv[0])
    return subprocess.run(argv, capture_output=True, text=True, timeout=10, check=True).stdout


def detect(nvml: Any = None, run: Callable[[list[str]], str] | None = None, torch: Any = None) -> Hardware:
    """Probe this machine; pass fakes for tests. Never imports torch."""
    if nvml is None:
        try:
            import pynvml as nvml  # nvidia-ml-py
        except ImportError:
            nvml = None
    found = _detect_nvml(nvml) if nvml is not None else None
    found = found or _detect_smi(run or _run)
    torch = torch if torch is not None else sys.modules.get("torch")
    found = found or (_detect_torch(torch) if torch is not None else None)
    return found or _cpu()


@functools.cache
def detect_cached() -> Hardware:
    return detect()


def resolve_hardware(value: str, profiles: dict[str, dict[str, Any]]) -> Hardware:
    """`auto`, a built-in profile name, or a YAML file path."""
    if value == "auto":
        return detect_cached()
    if value in profiles:
        return hardware_from_dict(profiles[value], f"profile {value}")
    if value.endswith((".yaml", ".yml")) or Path(value).exists():
        from dcpctl.plan.yamlio import read_yaml
        data = read_yaml(Path(value))
        return hardware_from_dict(data.get("hardware", data), value)
    raise UserError(f"unknown hardware {value!r}; use auto, a YAML file, or one of: {', '.join(sorted(profiles))}")
