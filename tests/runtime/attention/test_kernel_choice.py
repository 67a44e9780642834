"""Which local MLA decode kernel runs and the reason printed for it (kernel_choice): fake hardware, no GPU."""
import pytest
import torch

from dcpctl.runtime import notes
from dcpctl.runtime.attention import kernel_choice as kc
from dcpctl.runtime.attention.triton_mla import KernelConfig, default_config
from dcpctl.runtime.gpu import GpuFacts, facts_from

H200 = GpuFacts((9, 0), 232_448, 132)
GLUON = KernelConfig(64, 64, 8, 2, 1, True, gluon=True)


def blocker(cfg=GLUON, gpu=H200, dtype=torch.bfloat16, row=576, v_dim=512, kv_scale=None, missing=None):
    return kc.gluon_blocker(cfg, gpu, dtype, row, v_dim, kv_scale, gluon_missing=missing)


def test_the_deepseek_shape_runs_gluon_on_hopper():
    assert blocker() is None
    assert blocker(kv_scale=1.0) is None
    assert blocker(dtype=torch.float16) is None


@pytest.mark.parametrize("kw, why", [
    (dict(cfg=GLUON._replace(gluon=False)), "the tile config does not ask for it"),
    (dict(missing="Triton 3.9.0 is installed; the kernel is written for 3.6"), "Triton 3.9.0 is installed"),
    (dict(gpu=None), "the KV pool is not on a GPU"),
    (dict(gpu=GpuFacts((8, 0), 166_912, 108)), "sm_80 is not Hopper (sm_90)"),
    (dict(gpu=GpuFacts((10, 0), 232_448, 148)), "sm_100 is not Hopper (sm_90)"),
    (dict(gpu=GpuFacts((8, 0), 166_912, 108), missing="Triton 3.9.0 is installed"), "sm_80 is not Hopper"),  # not Triton
    (dict(dtype=torch.float8_e4m3fn), "the KV pool is float8_e4m3fn (it reads 16-bit pools)"),
    (dict(kv_scale=0.5), "the KV pool carries a scale"),
    (dict(cfg=GLUON._replace(num_warps=4)), "it does not run the tiles (64, 64, 4, 2)"),
    (dict(row=48, v_dim=32), "the latent row 32 + 16 is not 64-element parts"),
    (dict(row=640), "its tiles need 249 KB of shared memory, over the GPU's 227 KB"),
])
def test_each_blocker_names_its_cause(kw, why):
    assert blocker(**kw).startswith(why)


def test_describe_says_which_kernel_and_why():
    cpu = torch.device("cpu")
    line = kc.describe(16, default_config(16), cpu, torch.bfloat16, 576, 512, None)
    assert line == ("local attention: the Triton MLA kernel (16 heads x 128 tokens per program, 2 stages) for 16 "
                    "query heads per rank (not the Gluon kernel: 16 query heads per rank are not a multiple of its 64)")
    line = kc.describe(128, default_config(128), cpu, torch.bfloat16, 576, 512, None)
    assert line.startswith("local attention: the Triton MLA kernel (64 heads x 64 tokens per program, 2 stages)")
    assert line.endswith("(not the Gluon kernel: the KV pool is not on a GPU)")


@pytest.mark.parametrize("launcher, line", [(True, "dcpctl-note local attention: x\n"),
                                            (False, "dcpctl: local attention: x\n")])
def test_a_note_is_printed_once(capsys, monkeypatch, launcher, line):
    # under the launcher a protocol line (it dedups across ranks), elsewhere a plain one
    monkeypatch.setattr(notes, "_sent", set())
    if launcher:
        monkeypatch.setenv("DCPCTL_LAUNCH_CONFIG", "launch.yaml")
    else:
        monkeypatch.delenv("DCPCTL_LAUNCH_CONFIG", raising=False)
    for _ in range(3):
        notes.note_once("local attention: x")
    assert capsys.readouterr().err == line


def test_a_protocol_line_is_one_write(monkeypatch):
    # ranks share torchrun's stderr pipe: a line written in two pieces (print's text, then its newline)
    # can interleave with another rank's line into one garbled line
    writes = []

    class Err:
        def write(self, s):
            writes.append(s)

        def flush(self):
            pass
    monkeypatch.setattr(notes.sys, "stderr", Err())
    monkeypatch.setattr(notes, "_sent", set())
    monkeypatch.setenv("DCPCTL_LAUNCH_CONFIG", "launch.yaml")
    notes.note_once("local attention: x")
    assert writes == ["dcpctl-note local attention: x\n"]


def test_gpu_facts_read_the_plans_probe():
    from types import SimpleNamespace

    from dcpctl.plan.detect import Gpu, Probe
    found = Probe((Gpu(0, "NVIDIA B200", 179.1, 100, "GPU-0a1b"), Gpu(1, "NVIDIA H200", 140.4, 90, "GPU-9f8e")), "nvml")
    props = SimpleNamespace(uuid="9f8e", shared_memory_per_multiprocessor=233_472, multi_processor_count=132)
    assert facts_from(props, found) == H200                   # torch's bare UUID finds NVML's GPU-... record
    torch_only = SimpleNamespace(**vars(props), major=8, minor=0)
    assert facts_from(torch_only, None).sm == (8, 0)          # no probe answer: torch's own capability
    assert facts_from(SimpleNamespace(**{**vars(torch_only), "uuid": "ffff"}), found).sm == (8, 0)
