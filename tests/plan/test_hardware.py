import subprocess
from types import SimpleNamespace

import pytest

from dcpctl.plan import presets
from dcpctl.plan.errors import UserError
from dcpctl.plan.hardware import detect, resolve_hardware


class FakeNvml:
    NVML_GPU_FABRIC_STATE_COMPLETED = 3

    def __init__(self, count=8, name="NVIDIA GB200", cc=(10, 0), uuid=b"\x01" * 16, state=3, nvlink=1):
        self.count, self.name, self.cc, self.uuid, self.state, self.nvlink = count, name, cc, uuid, state, nvlink

    def nvmlInit(self): pass
    def nvmlShutdown(self): pass
    def nvmlDeviceGetCount(self): return self.count
    def nvmlDeviceGetHandleByIndex(self, i): return i
    def nvmlDeviceGetName(self, h): return self.name.encode()
    def nvmlDeviceGetMemoryInfo(self, h): return SimpleNamespace(total=186 * 2**30)
    def nvmlDeviceGetCudaComputeCapability(self, h): return self.cc
    def nvmlDeviceGetNvLinkState(self, h, link): return self.nvlink
    def nvmlDeviceGetGpuFabricInfo(self, h): return SimpleNamespace(state=self.state, clusterUuid=self.uuid)


def no_smi(argv):
    raise FileNotFoundError(argv[0])


def test_nvml_mnnvl():
    hw = detect(nvml=FakeNvml(), run=no_smi)
    assert (hw.gpu_name, hw.gpus_per_node, hw.sm, hw.nvlink, hw.mnnvl, hw.source) == (
        "NVIDIA GB200", 8, 100, True, True, "detected: nvml")


def test_nvml_h200_box_is_not_mnnvl():
    # a 2x H200 NVLink box reads fabric state Completed with a zero cluster UUID
    hw = detect(nvml=FakeNvml(count=2, name="NVIDIA H200", cc=(9, 0), uuid=b"\x00" * 16), run=no_smi)
    assert (hw.sm, hw.nvlink, hw.mnnvl) == (90, True, False)


SMI_QUERY = "NVIDIA H200, 143771, 9.0\nNVIDIA H200, 143771, 9.0\n"
SMI_Q = """
    Fabric
        State                             : Completed
        Status                            : Success
        CliqueId                          : 0
        ClusterUUID                       : 00000000-0000-0000-0000-000000000000
"""


def fake_smi(query=SMI_QUERY, q=SMI_Q, links="Link 0: 26.562 GB/s"):
    def run(argv):
        if "--query-gpu=name,memory.total,compute_cap" in argv:
            return query
        return q if "-q" in argv else links
    return run


def test_nvidia_smi_fallback():
    hw = detect(nvml=None, run=fake_smi(), torch=SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: False)))
    assert (hw.gpus_per_node, hw.memory_gib, hw.sm, hw.nvlink, hw.mnnvl, hw.source) == (
        2, 140.4, 90, True, False, "detected: nvidia-smi")
    hw = detect(nvml=None, run=fake_smi(q=SMI_Q.replace("00000000-0000", "1234abcd-0000")))
    assert hw.mnnvl


def test_torch_then_cpu_fallback():
    def fails(argv):
        raise subprocess.CalledProcessError(9, argv)
    props = SimpleNamespace(name="NVIDIA H100", total_memory=80 * 2**30, major=9, minor=0)
    cuda = SimpleNamespace(is_available=lambda: True, get_device_properties=lambda i: props, device_count=lambda: 4)
    hw = detect(nvml=None, run=fails, torch=SimpleNamespace(cuda=cuda))
    assert (hw.gpus_per_node, hw.sm, hw.source) == (4, 90, "detected: torch")
    nocuda = SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: False))
    assert detect(nvml=None, run=fails, torch=nocuda).device == "cpu"


def test_profiles_and_yaml(tmp_path):
    profiles = presets.hardware_profiles()
    assert set(profiles) >= {"h100-8", "h200-8", "b200-8", "b300-8", "gb200-nvl72", "gb300-nvl72", "cpu"}
    assert resolve_hardware("gb300-nvl72", profiles).mnnvl
    with pytest.raises(UserError, match="unknown hardware 'h900'; use auto, a YAML file, or one of: b200-8"):
        resolve_hardware("h900", profiles)
    f = tmp_path / "hw.yaml"
    f.write_text("hardware:\n  name: mine\n  device: cuda\n  gpu_name: X\n  gpus_per_node: 4\n  memory_gib: 80\n"
                 "  sm: 90\n  nvlink: true\n  mnnvl: false\n")
    assert resolve_hardware(str(f), profiles).gpus_per_node == 4
    f.write_text("hardware:\n  name: mine\n  bogus: 1\n")
    with pytest.raises(UserError, match=r"unknown hardware field\(s\) \['bogus'\]"):
        resolve_hardware(str(f), profiles)
    f.write_text("hardware: [\n")
    with pytest.raises(UserError, match=r"hw.yaml is not valid YAML \(line 2, column 1\)"):
        resolve_hardware(str(f), profiles)
