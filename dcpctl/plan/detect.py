"""Probe this machine's GPUs once (NVML, else nvidia-smi, else an already-imported torch): a `Probe` value.

Per GPU: name, memory, compute capability, UUID. Per node: NVLink between the GPUs (NVML's P2P
status from GPU 0 to each other GPU, else GPU 0's active links), GPU 0's active link count and
per-link speed where NVML or nvidia-smi reports it, and the GPU fabric state and cluster UUID
(MNNVL = state completed and a non-zero cluster UUID; a 2x H200 NVLink box reads Completed with a
zero UUID). Never imports torch; `probe()` is memoized, so the plan and the runtime read one answer.
"""
from __future__ import annotations

import ctypes
import functools
import inspect
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, Callable

Run = Callable[[list[str]], str]
FABRIC_STATES = {0: "not supported", 1: "not started", 2: "in progress", 3: "completed"}


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_gib: float
    sm: int  # compute capability * 10
    uuid: str = ""


@dataclass(frozen=True)
class Probe:
    gpus: tuple[Gpu, ...]
    via: str                      # nvml | nvidia-smi | torch
    nvlink: bool = False          # NVLink between the node's GPUs (one GPU: an active link)
    nvlink_peers: int = 0         # other GPUs GPU 0 reaches over NVLink
    links: int = 0                # GPU 0's active NVLinks
    link_speed_gbps: float = 0.0  # per link, one direction, as the driver reports it (0: not reported)
    fabric_state: str = ""
    cluster_uuid: str = ""

    @property
    def mnnvl(self) -> bool:
        return self.fabric_state == "completed" and bool(self.cluster_uuid.replace("0", "").replace("-", ""))

    def find(self, uuid: str) -> Gpu | None:
        """The GPU with this UUID (NVML's `GPU-...` or torch's bare form), None when none has it."""
        key = _uuid_key(uuid)
        return next((g for g in self.gpus if key and _uuid_key(g.uuid) == key), None)


def _uuid_key(uuid: str) -> str:
    return uuid.strip().lower().removeprefix("gpu-")


def _text(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def _uuid(raw: Any) -> str:
    b = bytes(raw or b"")
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}" if len(b) == 16 else h


# ---- NVML ----------------------------------------------------------------------------------

def probe_nvml(nvml: Any) -> Probe | None:
    try:
        nvml.nvmlInit()
    except Exception:
        return None
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        if not handles:
            return None
        gpus = tuple(_nvml_gpu(nvml, i, h) for i, h in enumerate(handles))
        links = _nvml_active_links(nvml, handles[0])
        peers = _nvml_peers(nvml, handles)
        nvlink = links > 0 if len(handles) == 1 or peers is None else peers == len(handles) - 1
        state, uuid = _nvml_fabric(nvml, handles[0])
        return Probe(gpus, "nvml", nvlink, peers or 0, links,
                     _nvml_link_speed(nvml, handles[0]) if links else 0.0, state, uuid)
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def _nvml_gpu(nvml: Any, i: int, h: Any) -> Gpu:
    major, minor = nvml.nvmlDeviceGetCudaComputeCapability(h)
    try:
        uuid = _text(nvml.nvmlDeviceGetUUID(h))
    except Exception:
        uuid = ""
    return Gpu(i, _text(nvml.nvmlDeviceGetName(h)), round(nvml.nvmlDeviceGetMemoryInfo(h).total / 2**30, 1),
               major * 10 + minor, uuid)


def _nvml_active_links(nvml: Any, h: Any) -> int:
    n = 0
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            n += bool(nvml.nvmlDeviceGetNvLinkState(h, link))
        except Exception:
            break   # NVML_ERROR_NOT_SUPPORTED / INVALID_ARGUMENT past the last link (or no NVLink at all)
    return n


def _nvml_peers(nvml: Any, handles: list[Any]) -> int | None:
    """GPUs that GPU 0 reaches over NVLink (P2P status OK), or None when NVML cannot say."""
    idx, ok = getattr(nvml, "NVML_P2P_CAPS_INDEX_NVLINK", 2), getattr(nvml, "NVML_P2P_STATUS_OK", 0)
    try:
        return sum(nvml.nvmlDeviceGetP2PStatus(handles[0], h, idx) == ok for h in handles[1:])
    except Exception:
        return None


def _nvml_link_speed(nvml: Any, h: Any) -> float:
    """Per-link speed in GB/s from NVML's field values (MB/s), 0 when not reported."""
    try:
        (v,) = nvml.nvmlDeviceGetFieldValues(h, [getattr(nvml, "NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON", 90)])
        return v.value.uiVal / 1000 if v.nvmlReturn == 0 else 0.0
    except Exception:
        return 0.0


def _nvml_fabric(nvml: Any, h: Any) -> tuple[str, str]:
    """(state, cluster UUID) through whichever fabric call this nvidia-ml-py has, ("", "") when none answers.

    nvidia-ml-py 12.535+ has `nvmlDeviceGetGpuFabricInfoV(handle, byref(c_nvmlGpuFabricInfoV_t()))` and
    the deprecated `nvmlDeviceGetGpuFabricInfo(handle, byref(c_nvmlGpuFabricInfo_t()))`, both filling the
    struct; other wrappers take the handle alone and return the struct."""
    for fn_name, struct_name in (("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t"),
                                 ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t")):
        fn, struct = getattr(nvml, fn_name, None), getattr(nvml, struct_name, None)
        if fn is None:
            continue
        try:
            if _positional_params(fn) >= 2 and struct is not None:
                info = struct()
                fn(h, ctypes.byref(info))
            else:
                info = fn(h)
            return FABRIC_STATES.get(int(info.state), str(info.state)), _uuid(info.clusterUuid)
        except Exception:
            continue
    return "", ""


def _positional_params(fn: Callable[..., Any]) -> int:
    try:
        return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                   for p in inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return 1


# ---- nvidia-smi ----------------------------------------------------------------------------

def probe_smi(run: Run) -> Probe | None:
    try:
        rows = run(["nvidia-smi", "--query-gpu=index,name,memory.total,compute_cap,uuid",
                    "--format=csv,noheader,nounits"])
    except (OSError, subprocess.SubprocessError):
        return None
    gpus = []
    for line in (r for r in rows.strip().splitlines() if r.strip()):
        index, name, mem_mib, cap, uuid = [x.strip() for x in line.split(",")]
        major, minor = (int(x) for x in cap.split("."))
        gpus.append(Gpu(int(index), name, round(float(mem_mib) / 1024, 1), major * 10 + minor, uuid))
    if not gpus:
        return None
    speeds = _smi_link_speeds(_smi_or_empty(run, ["nvidia-smi", "nvlink", "--status", "-i", "0"]))
    state, uuid = _smi_fabric(_smi_or_empty(run, ["nvidia-smi", "-q", "-i", "0"]))
    speed = min(speeds) if speeds else 0.0
    # nvidia-smi names no link's peer: active links count as NVLink between the GPUs (peers unknown: 0)
    return Probe(tuple(gpus), "nvidia-smi", bool(speeds), 0, len(speeds), speed, state, uuid)


def _smi_or_empty(run: Run, argv: list[str]) -> str:
    try:
        return run(argv)
    except (OSError, subprocess.SubprocessError):
        return ""


def _smi_link_speeds(text: str) -> list[float]:
    """`nvidia-smi nvlink --status`: `Link 0: 26.562 GB/s` per active link (inactive ones say so)."""
    out = []
    for line in text.splitlines():
        head, _, value = line.partition(":")
        if head.strip().lower().startswith("link") and value.strip().endswith("GB/s"):
            try:
                out.append(float(value.split()[0]))
            except ValueError:
                pass
    return out


def _smi_fabric(query: str) -> tuple[str, str]:
    """`nvidia-smi -q` Fabric section: its State and ClusterUUID."""
    state, uuid = "", ""
    for line in query.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip().lower(), value.strip()
        if key == "state" and not state:
            state = value.lower()
        elif key in ("clusteruuid", "cluster uuid"):
            uuid = value
    return state, uuid


# ---- torch (only when already imported) ----------------------------------------------------

def probe_torch(torch: Any) -> Probe | None:
    if not torch.cuda.is_available():
        return None
    gpus = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        gpus.append(Gpu(i, p.name, round(p.total_memory / 2**30, 1), p.major * 10 + p.minor,
                        str(getattr(p, "uuid", "") or "")))
    return Probe(tuple(gpus), "torch") if gpus else None


def _run(argv: list[str]) -> str:
    if shutil.which(argv[0]) is None:
        raise FileNotFoundError(argv[0])
    return subprocess.run(argv, capture_output=True, text=True, timeout=10, check=True).stdout


def probe_machine(nvml: Any = None, run: Run | None = None, torch: Any = None) -> Probe | None:
    """NVML (nvidia-ml-py) when installed, else nvidia-smi, else torch if already imported; None: no GPU.
    Pass fakes for tests."""
    if nvml is None:
        try:
            import pynvml as nvml  # nvidia-ml-py
        except ImportError:
            nvml = None
    found = probe_nvml(nvml) if nvml is not None else None
    found = found or probe_smi(run or _run)
    torch = torch if torch is not None else sys.modules.get("torch")
    return found or (probe_torch(torch) if torch is not None else None)


@functools.cache
def probe() -> Probe | None:
    """This machine, probed once per process: what `--hardware auto` and the runtime's GPU facts read."""
    return probe_machine()
