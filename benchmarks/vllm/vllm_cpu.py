"""Run vLLM 0.34.0's config code on a CPU: import-only stand-ins for its CUDA extensions and a faked CUDA
platform.

Used only inside the vLLM venv (benchmarks/vllm/setup_venv.sh) by vllm_grid_worker.py, dump_flags.py and
tests/export/test_export_vllm_accepted.py. Nothing here runs a kernel: the stand-ins raise if called.
Assumptions, each one what a CUDA build of the release ships: the FlashAttention-3 MLA kernel
(`fa_utils.flash_attn_supports_mla`, SM90) and FlashMLA's dense kernel (`ops/flashmla.py`
`is_flashmla_dense_supported`, SM90/SM100) are present; FlashInfer imports (a stub package here, from
the attention selector on: `allow_flashinfer`);
tokenspeed_mla, an optional extra, is not installed (as in a plain `pip install vllm`).
"""
from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import sys
import types

HW = {"h100-8": (90, 8, "NVIDIA H100 80GB HBM3", 80, 132), "h200-8": (90, 8, "NVIDIA H200", 141, 132),
      "b200-8": (100, 8, "NVIDIA B200", 180, 148), "b300-8": (103, 8, "NVIDIA B300 SXM6 AC", 270, 148),
      "gb200-nvl72": (100, 4, "NVIDIA GB200", 186, 152), "gb300-nvl72": (103, 4, "NVIDIA GB300", 279, 152)}


class _Stub(types.ModuleType):
    """Import-only stand-in for a compiled extension: every attribute is a callable that raises when
    called."""

    __path__: list[str] = []

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)

        def _unavailable(*a, **k):
            raise RuntimeError(f"{self.__name__}.{name} is a CPU stand-in")
        return _unavailable


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    prefixes = ["vllm.vllm_flash_attn", "vllm._C", "vllm._moe_C", "vllm._C_stable_libtorch"]

    def find_spec(self, name, path=None, target=None):
        if any(name == p or name.startswith(p + ".") for p in self.prefixes):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _Stub(spec.name)

    def exec_module(self, module):
        pass


class _Ops:
    """torch.ops._C and friends: the capability queries answer False; any other op is absent."""

    def __getattr__(self, op: str):
        if "supports" not in op:
            raise AttributeError(op)
        return lambda *a, **k: False


_FINDER = _StubFinder()


def allow_flashinfer() -> None:
    """From here on `import flashinfer` finds a stand-in: for the attention selector, which imports the
    FlashInfer MLA backend. Not during config construction, where FlashInfer's presence turns on compile
    passes that need CUDA ops (config/compilation.py flashinfer_max_size); no DCP default depends on them."""
    if "flashinfer" not in _FINDER.prefixes:
        _FINDER.prefixes.append("flashinfer")


def install(hardware: str) -> type:
    """Stand-ins first, then a CUDA platform with the hardware's compute capability, name, memory and GPU
    count."""
    sm, gpus, name, mem_gib, sms = HW[hardware]
    sys.meta_path.insert(0, _FINDER)
    import torch
    for ns in ("_C", "_moe_C", "_C_cache_ops", "_C_custom_ar", "_rocm_C"):
        setattr(torch.ops, ns, _Ops())
    import vllm.platforms as platforms
    from vllm.platforms.cuda import CudaPlatformBase
    from vllm.platforms.interface import DeviceCapability

    class FakeCuda(CudaPlatformBase):
        @classmethod
        def get_device_capability(cls, device_id=0):
            return DeviceCapability(sm // 10, sm % 10)

        @classmethod
        def get_device_name(cls, device_id=0):
            return name

        @classmethod
        def get_device_total_memory(cls, device_id=0):
            return mem_gib << 30

        @classmethod
        def device_count(cls):
            return gpus

        @classmethod
        def num_compute_units(cls, device_id=0):
            return sms

        @classmethod
        def is_fully_connected(cls, physical_device_ids):
            return True

        @classmethod
        def get_device_uuid(cls, device_id=0):
            return f"GPU-cpu-stand-in-{device_id}"

    platforms._current_platform = FakeCuda()
    _kernels_present(sm)
    return FakeCuda


@contextlib.contextmanager
def cuda_tensors_on_meta():
    """Backend modules allocate CUDA workspaces at import (cutlass_mla.py SM100Workspace): put them on
    `meta`."""
    import torch
    saved = {f: getattr(torch, f) for f in ("empty", "zeros")}

    def wrap(fn):
        def inner(*a, **k):
            if str(k.get("device", "")).startswith("cuda"):
                k["device"] = "meta"
            return fn(*a, **k)
        return inner
    try:
        for f, fn in saved.items():
            setattr(torch, f, wrap(fn))
        yield
    finally:
        for f, fn in saved.items():
            setattr(torch, f, fn)


def _kernels_present(sm: int) -> None:
    import vllm.vllm_flash_attn.flash_attn_interface as fa
    fa.is_fa_version_supported = lambda version, *a, **k: version == 3 and sm // 10 == 9
    fa.fa_version_unsupported_reason = (lambda version, *a, **k:
                                        None if version == 3 and sm // 10 == 9 else "arch")
    import vllm.v1.attention.backends.mla.flashattn_mla as fa_mla
    import vllm.v1.attention.ops.flashmla as flashmla
    fa_mla.flash_attn_supports_mla = lambda: sm // 10 == 9
    flashmla.is_flashmla_dense_supported = lambda: (True, None) if sm // 10 in (9, 10) else (False, "arch")
