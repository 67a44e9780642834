"""Make FlashMLA's dense decode importable: built from its source tree as a torch extension.

FlashMLA (github.com/deepseek-ai/FlashMLA) ships no wheel and its setup.py fetches CUTLASS as a git
submodule, so on a machine without network it is built here as a torch extension: $DCPCTL_FLASHMLA_SDIST
names its source tarball, unpacked under $DCPCTL_FLASHMLA_WORK (default /tmp/dcpctl-flashmla).
`tools/gpu_env.sh prepare` writes .vendor/flashmla-<commit>-cutlass-<commit>.tar.gz: the tree with its pinned
CUTLASS's headers at csrc/cutlass/include, which the build uses.  A tarball without them (the older
.vendor/flashmla-<commit>.tar.gz) takes CUTLASS from FlashInfer's sdist ($DCPCTL_FLASHINFER_SDIST, its
3rdparty/cutlass, CUTLASS 4.0), and says so: with 4.0, nvcc 13.0 compiles splitkv_mla.cu to 255 registers and
506 bytes of spill stores; with the pinned e94e888 (3.9) to 239 registers and none (`ptxas -v`, same flags).
Only what the bf16 paged decode needs is compiled: flash_api.cpp, get_mla_metadata.cu, splitkv_mla.cu,
mla_combine.cu, for sm_90a, fp16 left out (-DFLASH_MLA_DISABLE_FP16), with CUDA 13's include/cccl added for
the host compiler.  The build is cached per torch version (torch's extension cache), so a process after the
first loads it in a second.  (An installed `flash_mla` wheel is not used: its extension's signature changed
after this commit, csrc/sm90/, and this module calls the one it builds.)

`load()` is asked once per process; it returns the extension module (get_mla_metadata, fwd_kvcache_mla), or
None and why (a clause for a note).
"""
from __future__ import annotations

import functools
import os
import tarfile
import time
from pathlib import Path
from types import ModuleType

from dcpctl import knobs
from dcpctl.plan.attention_table import flashmla_page_blocker
from dcpctl.runtime.attention.flashinfer_setup import SDIST_ENV

FLASHMLA_SDIST_ENV = "DCPCTL_FLASHMLA_SDIST"
WORK_ENV = "DCPCTL_FLASHMLA_WORK"
SOURCES = ("csrc/flash_api.cpp", "csrc/kernels/get_mla_metadata.cu", "csrc/kernels/mla_combine.cu",
           "csrc/kernels/splitkv_mla.cu")
CUTLASS = "3rdparty/cutlass/include"       # inside FlashInfer's sdist (the fallback)
OWN_CUTLASS = "csrc/cutlass/include"       # FlashMLA's submodule, as tools/gpu_env.sh prepare bundles it
NVCC_FLAGS = ["-O3", "-std=c++17", "-DNDEBUG", "-D_USE_MATH_DEFINES", "-Wno-deprecated-declarations",
              "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
              "-U__CUDA_NO_HALF2_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
              "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math",
              "--ptxas-options=--register-usage-level=10", "-DFLASH_MLA_DISABLE_FP16",
              "-gencode=arch=compute_90a,code=sm_90a"]
# the host compiler keeps torch's own -std (its headers' standard); FlashMLA's host code is C++17
CXX_FLAGS = ["-O3", "-DNDEBUG", "-Wno-deprecated-declarations", "-DFLASH_MLA_DISABLE_FP16"]


def unpack(tarball: Path, work: Path, marker: str, only: str = "") -> Path:
    """-> the tarball's top folder under work, holding at least its members under `only` (all when empty);
    an earlier unpack is reused when `marker` (a path under the top folder) is there."""
    if tarball.is_dir():
        return tarball
    with tarfile.open(tarball) as tf:
        members = tf.getmembers()
        top = members[0].name.split("/")[0]
        if not (work / top / marker).exists():
            work.mkdir(parents=True, exist_ok=True)
            keep = [m for m in members if m.name.startswith(f"{top}/{only}")]
            tf.extractall(work, members=keep, filter="data")
    return work / top


def flashmla_missing(page_size: int | None = None) -> str | None:
    """Why FlashMLA cannot run here, from facts known without a GPU (its build source, the page size), or
    None."""
    blocker = flashmla_page_blocker(page_size)
    if blocker is None and not knobs.is_set(FLASHMLA_SDIST_ENV):
        return f"FlashMLA is not built here (tools/gpu_env.sh prepare, then ${FLASHMLA_SDIST_ENV})"
    return blocker


def sources(sdist: Path, cutlass_sdist: Path | None, work: Path) -> tuple[list[str], list[str]]:
    """(the .cpp/.cu files, the include folders) of the decode build, unpacking the tarballs under work:
    CUTLASS from FlashMLA's own tree (csrc/cutlass/include) when it has it, else from cutlass_sdist
    (FlashInfer's)."""
    src = unpack(sdist, work, SOURCES[0])
    if (src / OWN_CUTLASS / "cutlass" / "cutlass.h").exists():
        return [str(src / s) for s in SOURCES], [str(src / "csrc"), str(src / OWN_CUTLASS)]
    if cutlass_sdist is None or not cutlass_sdist.exists():
        raise FileNotFoundError(f"{sdist.name} has no {OWN_CUTLASS} and ${SDIST_ENV}={cutlass_sdist} does "
                                "not exist (rerun tools/gpu_env.sh prepare)")
    fi = unpack(cutlass_sdist, work, f"{CUTLASS}/cutlass/cutlass.h", only=CUTLASS)
    return [str(src / s) for s in SOURCES], [str(src / "csrc"), str(fi / CUTLASS)]


def own_cutlass(sdist: Path) -> bool:
    """Whether the FlashMLA tarball (or tree) carries its pinned CUTLASS's headers."""
    if sdist.is_dir():
        return (sdist / OWN_CUTLASS / "cutlass" / "cutlass.h").exists()
    with tarfile.open(sdist) as tf:
        return any(n.endswith(f"/{OWN_CUTLASS}/cutlass/cutlass.h") for n in tf.getnames())


def build(sdist: Path, cutlass_sdist: Path | None, work: Path, verbose: bool = False) -> ModuleType:
    """Compile (or load the cached) extension `flash_mla_cuda`; MAX_JOBS defaults to the CPU count."""
    from torch.utils import cpp_extension

    from dcpctl.runtime.attention.flashinfer_setup import build_tools
    build_tools()
    knobs.setdefault("MAX_JOBS", str(os.cpu_count() or 1))
    srcs, incs = sources(sdist, cutlass_sdist, work)
    import torch
    out = work / f"build-torch{torch.__version__}"
    out.mkdir(parents=True, exist_ok=True)
    return cpp_extension.load(name="flash_mla_cuda", sources=srcs, extra_include_paths=incs,
                              build_directory=str(out),
                              extra_cflags=CXX_FLAGS + host_includes(cpp_extension.CUDA_HOME),
                              extra_cuda_cflags=NVCC_FLAGS, verbose=verbose)


def host_includes(cuda_home: str | None) -> list[str]:
    """The C++ compiler's extra include: CUDA 13 keeps CCCL (cuda/std/..., which CUTLASS's fast_math.h
    includes from flash_api.cpp) under include/cccl, a folder nvcc adds by itself and g++ does not."""
    cccl = Path(cuda_home or "/nonexistent") / "include" / "cccl"
    return [f"-I{cccl}"] if cccl.is_dir() else []


def _paths() -> tuple[Path, Path | None, Path]:
    """(FlashMLA's tarball, FlashInfer's sdist or None, the work folder) from the environment (configured)."""
    fi = knobs.get(SDIST_ENV)
    return (Path(str(knobs.get(FLASHMLA_SDIST_ENV))), Path(str(fi)) if fi else None,
            Path(str(knobs.get(WORK_ENV))))


@functools.lru_cache(maxsize=1)
def load() -> tuple[ModuleType | None, str]:
    """(the extension with get_mla_metadata and fwd_kvcache_mla, where it came from) or (None, why not)."""
    missing = flashmla_missing()
    if missing is not None:
        return None, missing
    sdist, fi, work = _paths()
    if not sdist.exists():
        return None, f"${FLASHMLA_SDIST_ENV}={sdist} does not exist"
    own = own_cutlass(sdist)
    if not own and (fi is None or not fi.exists()):
        return None, (f"{sdist.name} has no CUTLASS of its own and ${SDIST_ENV}={fi} does not exist (rerun "
                      f"tools/gpu_env.sh prepare)")
    t0 = time.perf_counter()
    try:
        mod = build(sdist, fi, work)
    except Exception as e:       # a compile failure costs the backend, never the run
        return (None,
                f"building FlashMLA from {sdist.name} failed ({type(e).__name__}: "
                f"{str(e).splitlines()[0][:160]})")
    cut = ("its pinned CUTLASS" if own
           else "FlashInfer's CUTLASS 4.0 (its decode kernel spills: rerun tools/gpu_env.sh prepare)")
    return (mod,
            f"FlashMLA {sdist.name.removesuffix('.tar.gz')} with {cut}, built in "
            f"{time.perf_counter() - t0:.0f} s")


def main() -> int:
    """`. tools/gpu_env.sh setup`: build (or load the cached build) verbosely, timed; 2 when not
    configured."""
    missing = flashmla_missing()
    if missing is not None:
        print(f"dcpctl: {missing}")
        return 2
    t0 = time.perf_counter()
    mod = build(*_paths(), verbose=True)
    print(f"FlashMLA: {mod.__file__}, built or loaded in {time.perf_counter() - t0:.1f} s")
    return 0
