import ctypes
import subprocess
from types import SimpleNamespace

import pytest

from dcpctl.plan import presets
from dcpctl.plan.detect import probe_machine
from dcpctl.plan.errors import UserError
from dcpctl.plan.hardware import from_probe, match_profile, resolve_hardware

PROFILES = presets.hardware_profiles()
UUID = bytes(range(1, 17))


class FabricInfo(ctypes.Structure):   # nvidia-ml-py's c_nvmlGpuFabricInfoV_t layout (v2)
    _fields_ = [("version", ctypes.c_uint), ("clusterUuid", ctypes.c_uint8 * 16), ("status", ctypes.c_uint),
                ("cliqueId", ctypes.c_uint32), ("state", ctypes.c_uint), ("healthMask", ctypes.c_uint32)]


class FakeNvml:
    """nvidia-ml-py's answers for a node of `names` GPUs. fabric: 'v' (nvmlDeviceGetGpuFabricInfoV fills a
    struct), 'old' (the deprecated nvmlDeviceGetGpuFabricInfo fills one), None (no fabric call answers)."""
    NVML_GPU_FABRIC_STATE_COMPLETED = 3
    NVML_NVLINK_MAX_LINKS = 18
    NVML_P2P_CAPS_INDEX_NVLINK = 2
    NVML_P2P_STATUS_OK = 0
    c_nvmlGpuFabricInfoV_t = c_nvmlGpuFabricInfo_t = FabricInfo

    def __init__(self, names, mem_gib=140.4, cc=(9, 0), links=0, speed_mbps=0, p2p=None, fabric=None, state=3,
                 uuid=b"\x00" * 16):
        self.names, self.mem, self.cc, self.links, self.speed = names, mem_gib, cc, links, speed_mbps
        self.p2p = p2p if p2p is not None else links > 0
        self.fabric, self.state, self.uuid = fabric, state, uuid

    def nvmlInit(self): pass
    def nvmlShutdown(self): pass
    def nvmlDeviceGetCount(self): return len(self.names)
    def nvmlDeviceGetHandleByIndex(self, i): return i
    def nvmlDeviceGetName(self, h): return self.names[h].encode()
    def nvmlDeviceGetUUID(self, h): return f"GPU-{h:08d}"
    def nvmlDeviceGetMemoryInfo(self, h):
        mem = self.mem[h] if isinstance(self.mem, list) else self.mem
        return SimpleNamespace(total=int(mem * 2**30))
    def nvmlDeviceGetCudaComputeCapability(self, h): return self.cc

    def nvmlDeviceGetNvLinkState(self, h, link):
        if self.links == 0:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return int(link < self.links)

    def nvmlDeviceGetP2PStatus(self, a, b, index):
        assert index == 2
        return 0 if self.p2p else 4

    def nvmlDeviceGetFieldValues(self, h, ids):
        assert ids == [90]  # NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON
        return [SimpleNamespace(nvmlReturn=0 if self.speed else 3, value=SimpleNamespace(uiVal=self.speed))]

    def _fill(self, ref):
        info = ref._obj
        info.state, info.clusterUuid[:] = self.state, list(self.uuid)

    def nvmlDeviceGetGpuFabricInfoV(self, h, info):
        if self.fabric != "v":
            raise RuntimeError("NVML_ERROR_FUNCTION_NOT_FOUND")
        self._fill(info)

    def nvmlDeviceGetGpuFabricInfo(self, h, info):
        if self.fabric != "old":
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        self._fill(info)


class HandleOnlyNvml(FakeNvml):
    def nvmlDeviceGetGpuFabricInfo(self, h):   # some wrappers: (handle) -> struct
        return SimpleNamespace(state=self.state, clusterUuid=self.uuid)


def no_smi(argv):
    raise FileNotFoundError(argv[0])


NO_TORCH = SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: False))


def detect(nvml=None, run=no_smi, torch=NO_TORCH):
    return from_probe(probe_machine(nvml=nvml, run=run, torch=torch), PROFILES)


def test_one_h200_takes_the_h200_profile_figures():
    hw = detect(FakeNvml(["NVIDIA H200"], mem_gib=140.4))   # what NVML reads on the one-GPU H200 machine
    assert (hw.name, hw.gpu_name, hw.gpus_per_node, hw.sm, hw.nvlink, hw.mnnvl) == (
        "detected-1x", "NVIDIA H200", 1, 90, False, False)
    assert (hw.hbm_tbps, hw.bf16_tflops, hw.coll_latency_us) == (4.8, 989, 15)
    assert hw.profile == "h200-8: NVIDIA H200 with 140.4 GiB is profile h200-8's GPU"
    assert hw.figure_source("hbm_tbps") == "profile h200-8"
    assert (hw.link_gbps, hw.figure_source("link_gbps")) == (
        0.0, "unknown: no NVLink on this node (PCIe is not modelled)")
    assert hw.to_dict()["link_gbps"] is None and hw.to_dict()["figures"]["bf16_tflops"] == "profile h200-8"


def test_eight_nvlinked_gpus_read_link_bandwidth_from_nvml():
    nvml = FakeNvml(["NVIDIA H100 80GB HBM3"] * 8, mem_gib=79.6, links=18, speed_mbps=26562, fabric="old")
    hw = detect(nvml)
    assert ((hw.gpus_per_node, hw.nvlink, hw.nvlink_peers, hw.mnnvl, hw.fabric_state)
            == (8, True, 7, False, "completed"))
    assert hw.cluster_uuid == "00000000-0000-0000-0000-000000000000"   # an NVLink box, not MNNVL
    assert (hw.link_gbps, hw.figure_source("link_gbps")) == (478.1, "nvml: 18 active NVLinks x 26.562 GB/s")
    assert (hw.hbm_tbps, hw.figure_source("hbm_tbps")) == (3.35, "profile h100-8")


def test_gpus_without_nvlink_between_them():
    hw = detect(FakeNvml(["NVIDIA H100 80GB HBM3"] * 2, mem_gib=79.6, links=18, speed_mbps=26562, p2p=False))
    assert (hw.nvlink, hw.nvlink_peers) == (False, 0)


@pytest.mark.parametrize("nvml",
                         [FakeNvml(["NVIDIA GB200"] * 4, mem_gib=184.0, cc=(10, 0), fabric="v", uuid=UUID),
                          HandleOnlyNvml(["NVIDIA GB200"] * 4, mem_gib=184.0, cc=(10, 0), uuid=UUID)])
def test_mnnvl_tray_through_either_fabric_call(nvml):
    hw = detect(nvml)
    assert (hw.gpus_per_node, hw.sm, hw.mnnvl, hw.fabric_state) == (4, 100, True, "completed")
    assert hw.cluster_uuid == "01020304-0506-0708-090a-0b0c0d0e0f10"
    assert hw.profile.startswith("gb200-nvl72: ") and hw.hbm_tbps == 8.0


def test_fabric_state_alone_is_not_mnnvl():
    # a 2x H200 NVLink box: fabric Completed, cluster UUID zero; a tray still forming: in progress
    assert not detect(FakeNvml(["NVIDIA H200"] * 2, links=18, speed_mbps=26562, fabric="v")).mnnvl
    hw = detect(FakeNvml(["NVIDIA H200"] * 2, links=18, speed_mbps=26562, fabric="v", state=2, uuid=UUID))
    assert (hw.mnnvl, hw.fabric_state) == (False, "in progress")


def test_unknown_gpu_has_unknown_figures():
    hw = detect(FakeNvml(["NVIDIA RTX 6000 Ada Generation"], mem_gib=47.5, cc=(8, 9)))
    assert (hw.hbm_tbps, hw.bf16_tflops, hw.link_gbps, hw.coll_latency_us) == (0, 0, 0, 0)
    assert hw.profile == "none: no built-in profile has NVIDIA RTX 6000 Ada Generation with 47.5 GiB"
    assert hw.figure_source("hbm_tbps") == ("unknown: no built-in profile has NVIDIA RTX 6000 Ada Generation "
                                            "with 47.5 GiB")


def test_mixed_models_are_reported_not_averaged():
    nvml = FakeNvml(["NVIDIA H200"] * 2 + ["NVIDIA H100 80GB HBM3"] * 2, mem_gib=[140.4, 140.4, 79.6, 79.6],
                    links=18, speed_mbps=26562)
    hw = detect(nvml)
    assert hw.gpu_name == "mixed: 2x NVIDIA H200, 2x NVIDIA H100 80GB HBM3"
    assert hw.gpu_models == (("NVIDIA H200", 2), ("NVIDIA H100 80GB HBM3", 2)) and hw.memory_gib == 79.6
    assert hw.hbm_tbps == 0 and "mixed GPU models" in hw.figure_source("hbm_tbps")


def test_profile_match_needs_the_name_and_the_memory():
    assert match_profile("NVIDIA B300 SXM6 AC", 268.6, PROFILES)[0] == "b300-8"
    assert match_profile("NVIDIA H200 NVL", 140.4, PROFILES)[0] is None   # another part: other figures
    name, why = match_profile("NVIDIA H100 80GB HBM3", 94.0, PROFILES)
    assert name is None and why.endswith("(profile h100-8 has 79.6 GiB)")


SMI_QUERY = "0, NVIDIA H200, 143771, 9.0, GPU-a\n1, NVIDIA H200, 143771, 9.0, GPU-b\n"
SMI_Q = """
    Fabric
        State                             : Completed
        Status                            : Success
        ClusterUUID                       : 00000000-0000-0000-0000-000000000000
"""
SMI_LINKS = ("GPU 0: NVIDIA H200 (UUID: GPU-a)\n\t Link 0: 26.562 GB/s\n\t Link 1: 26.562 GB/s\n\t Link 2: "
             "<inactive>\n")


def fake_smi(query=SMI_QUERY, q=SMI_Q, links=SMI_LINKS):
    def run(argv):
        if "--query-gpu=index,name,memory.total,compute_cap,uuid" in argv:
            return query
        return q if "-q" in argv else links
    return run


class BrokenNvml(FakeNvml):
    def nvmlInit(self):
        raise RuntimeError("NVML Shared Library Not Found")


def test_nvidia_smi_only():
    hw = detect(nvml=BrokenNvml([]), run=fake_smi())
    assert (hw.gpus_per_node, hw.memory_gib, hw.sm, hw.nvlink, hw.mnnvl, hw.source) == (
        2, 140.4, 90, True, False, "detected: nvidia-smi")
    assert (hw.link_gbps, hw.figure_source("link_gbps")) == (53.1,
                                                             "nvidia-smi: 2 active NVLinks x 26.562 GB/s")
    assert hw.figure_source("hbm_tbps") == "profile h200-8"
    assert detect(nvml=BrokenNvml([]), run=fake_smi(q=SMI_Q.replace("00000000-0000", "1234abcd-0000"))).mnnvl


def test_nvml_missing_then_torch_then_cpu():
    def fails(argv):
        raise subprocess.CalledProcessError(9, argv)
    props = SimpleNamespace(name="NVIDIA H100 80GB HBM3", total_memory=int(79.6 * 2**30), major=9, minor=0)
    cuda = SimpleNamespace(is_available=lambda: True, get_device_properties=lambda i: props,
                           device_count=lambda: 4)
    hw = detect(nvml=BrokenNvml([]), run=fails, torch=SimpleNamespace(cuda=cuda))
    assert (hw.gpus_per_node, hw.sm, hw.source, hw.hbm_tbps) == (4, 90, "detected: torch", 3.35)
    cpu = detect(nvml=BrokenNvml([]), run=fails)
    assert ((cpu.device, cpu.hbm_tbps) == ("cpu", 0)
            and cpu.figure_source("bf16_tflops").startswith("unknown: no GPU"))


def test_profiles_and_yaml(tmp_path):
    assert set(PROFILES) >= {"h100-8", "h200-8", "b200-8", "b300-8", "gb200-nvl72", "gb300-nvl72", "cpu"}
    assert resolve_hardware("gb300-nvl72", PROFILES).mnnvl
    assert resolve_hardware("h200-8", PROFILES).figure_source("link_gbps") == "profile h200-8"
    with pytest.raises(UserError, match="unknown hardware 'h900'; use auto, a YAML file, or one of: b200-8"):
        resolve_hardware("h900", PROFILES)
    f = tmp_path / "hw.yaml"
    f.write_text("hardware:\n  name: mine\n  device: cuda\n  gpu_name: X\n  gpus_per_node: 4\n  memory_gib: "
                 "80\n  sm: 90\n  nvlink: true\n  mnnvl: false\n  hbm_tbps: 2.0\n")
    mine = resolve_hardware(str(f), PROFILES)
    assert mine.gpus_per_node == 4 and mine.figure_source("hbm_tbps") == f"file {f}"
    assert mine.figure_source("bf16_tflops") == f"unknown: file {f} does not give it"
    f.write_text("hardware:\n  name: mine\n  bogus: 1\n")
    with pytest.raises(UserError, match=r"unknown hardware field\(s\) \['bogus'\]"):
        resolve_hardware(str(f), PROFILES)
    f.write_text("hardware: [\n")
    with pytest.raises(UserError, match=r"hw.yaml is not valid YAML \(line 2, column 1\)"):
        resolve_hardware(str(f), PROFILES)


class FakeLibNvml:
    """libnvidia-ml.so as nvidia-ml-py's own wrappers call it (ctypes arguments): 8 NVLinked H200s whose
    driver has only the fabric calls in `fabric`, so the real wrappers' signatures are what is tested."""
    def __init__(self, fabric=("nvmlDeviceGetGpuFabricInfoV",)):
        for name in fabric:
            setattr(self, name, self._fabric)

    @staticmethod
    def _index(handle):
        return ctypes.cast(handle, ctypes.c_void_p).value - 1

    def nvmlInitWithFlags(self, flags): return 0
    def nvmlShutdown(self): return 0

    def nvmlDeviceGetCount_v2(self, ref):
        ref._obj.value = 8
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, index, ref):
        ctypes.memmove(ctypes.addressof(ref._obj), ctypes.byref(ctypes.c_size_t(index.value + 1)),
                       ctypes.sizeof(ctypes.c_void_p))
        return 0

    def nvmlDeviceGetName(self, handle, buf, size):
        buf.value = b"NVIDIA H200"
        return 0

    def nvmlDeviceGetUUID(self, handle, buf, size):
        buf.value = f"GPU-{self._index(handle):08x}-0000-0000-0000-000000000000".encode()
        return 0

    def nvmlDeviceGetMemoryInfo(self, handle, ref):
        ref._obj.total = 143771 * 2**20
        return 0

    def nvmlDeviceGetCudaComputeCapability(self, handle, major, minor):
        major._obj.value, minor._obj.value = 9, 0
        return 0

    def nvmlDeviceGetNvLinkState(self, handle, link, ref):
        if link >= 18:
            return 2   # NVML_ERROR_INVALID_ARGUMENT past the last link
        ref._obj.value = 1
        return 0

    def nvmlDeviceGetP2PStatus(self, a, b, index, ref):
        ref._obj.value = 0 if index == 2 else 4
        return 0

    def nvmlDeviceGetFieldValues(self, handle, count, ref):
        ref._obj[0].nvmlReturn, ref._obj[0].value.uiVal = 0, 26562
        return 0

    def _fabric(self, handle, ref):
        ref._obj.state = 3   # completed, cluster UUID zero: one NVLink box
        return 0


@pytest.mark.parametrize("fabric", [("nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetGpuFabricInfo"),
                                    ("nvmlDeviceGetGpuFabricInfo",)])
def test_real_nvidia_ml_py_wrappers(monkeypatch, fabric):
    pynvml = pytest.importorskip("pynvml")   # nvidia-ml-py (the `nvml` extra)
    monkeypatch.setattr(pynvml, "nvmlLib", FakeLibNvml(fabric))
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    found = probe_machine(nvml=pynvml, run=no_smi, torch=NO_TORCH)
    assert [g.uuid[:12] for g in found.gpus[:2]] == ["GPU-00000000", "GPU-00000001"]
    assert (found.nvlink, found.nvlink_peers, found.links, found.link_speed_gbps) == (True, 7, 18, 26.562)
    assert (found.fabric_state, found.cluster_uuid, found.mnnvl) == (
        "completed", "00000000-0000-0000-0000-000000000000", False)
    hw = from_probe(found, PROFILES)
    assert ((hw.gpu_name, hw.memory_gib, hw.sm, hw.hbm_tbps, hw.link_gbps)
            == ("NVIDIA H200", 140.4, 90, 4.8, 478.1))
