"""Make `import flashinfer` work: an installed package (`pip install 'dcpctl[flashinfer]'`), or its sdist.

The device has no network, so there FlashInfer comes from its source release (tools/gpu_env.sh prepare
puts flashinfer_python-0.2.14.tar.gz in .vendor/): $DCPCTL_FLASHINFER_SDIST names the tarball (or its
unpacked folder).  It is unpacked under $DCPCTL_FLASHINFER_WORK (default /tmp/dcpctl-flashinfer), its
top-level csrc/ include/ 3rdparty/ are linked where an installed wheel keeps them (flashinfer/data/), and
the source tree goes first on sys.path.  0.2.14 reads the arch list through torch (TORCH_CUDA_ARCH_LIST;
its fa3 kernels add sm_90a themselves) and keeps its JIT cache under $FLASHINFER_WORKSPACE_BASE/.cache.

`load()` is asked once per process; it returns the module, or None and why (a clause for a note).
"""
from __future__ import annotations

import functools
import glob
import importlib
import importlib.util
import os
import shutil
import sys
import tarfile
from pathlib import Path
from types import ModuleType

from dcpctl import knobs
from dcpctl.plan.attention_table import flashinfer_installed

SDIST_ENV = "DCPCTL_FLASHINFER_SDIST"
WORK_ENV = "DCPCTL_FLASHINFER_WORK"
# flashinfer/data/<name> (where jit/env.py looks) -> the sdist folder (pyproject.toml package-dir)
DATA_LINKS = {"csrc": "csrc", "include": "include", "tvm_binding": "tvm_binding",
              "cutlass": "3rdparty/cutlass", "spdlog": "3rdparty/spdlog"}
SUPPORTED = ((0, 2, 14), (0, 3, 0))     # [lowest, highest) release whose MLA API this runtime calls


def unpack(tarball: Path, work: Path) -> Path:
    """-> the sdist root (flashinfer/ csrc/ include/ 3rdparty/ side by side); an earlier unpack is reused."""
    if tarball.is_dir():
        return tarball
    src = work / tarball.name.removesuffix(".tar.gz")
    if not (src / "flashinfer" / "__init__.py").is_file():
        work.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tarball) as tf:
            tf.extractall(work, filter="data")
    return src


def prepare_source(tarball: Path, work: Path) -> Path:
    """Unpack the sdist under work and link its data folders where the package looks for them."""
    src = unpack(tarball, work)
    data = src / "flashinfer" / "data"
    data.mkdir(exist_ok=True)
    for name, target in DATA_LINKS.items():
        if not (data / name).is_symlink() and not (data / name).exists():
            (data / name).symlink_to(Path("..", "..", target), target_is_directory=True)
    return src


def flashinfer_missing() -> str | None:
    """Why FlashInfer cannot be imported here (without importing it), or None."""
    if flashinfer_installed() or knobs.is_set(SDIST_ENV):
        return None
    return f"FlashInfer is not installed (pip install 'dcpctl[flashinfer]', or ${SDIST_ENV})"


def jit_environ(work: Path, arch: str = "9.0a") -> dict[str, str]:
    """What flashinfer.jit reads (at import): torch's arch list, the cache base, ninja's job count."""
    return {"TORCH_CUDA_ARCH_LIST": arch, "FLASHINFER_WORKSPACE_BASE": str(work),
            "MAX_JOBS": str(os.cpu_count() or 1)}


def cuda_home() -> str | None:
    """torch takes CUDA_HOME, else nvcc's grandparent (wrong for a /usr/local/bin/nvcc wrapper script)."""
    nvcc = shutil.which("nvcc")
    cands = [knobs.get("CUDA_HOME"), knobs.get("CUDA_PATH"),
             nvcc and str(Path(nvcc).resolve().parents[1]), "/usr/local/cuda",
             *sorted(glob.glob("/usr/local/cuda-*"))]
    return next((c for c in cands if c and (Path(c) / "include" / "cuda_runtime.h").is_file()), None)


def activate(src: Path, work: Path, packaging_wheel: Path | None = None) -> None:
    """Make `import flashinfer` load src: environment, sys.path, and ninja on PATH (jit runs `ninja`)."""
    for k, v in jit_environ(work).items():
        knobs.setdefault(k, v)
    build_tools()
    sys.path.insert(0, str(src))
    wheel = packaging_wheel or next(iter(sorted(src.parent.glob("packaging-*.whl"))), None)
    if importlib.util.find_spec("packaging") is None and wheel is not None:
        sys.path.append(str(wheel))            # flashinfer.jit imports `packaging`


def build_tools() -> None:
    """CUDA_HOME for torch's extension builder, and ninja (the pip package's, else the venv's) on PATH."""
    home = cuda_home()
    if home:
        knobs.put("CUDA_HOME", home)
        if "torch.utils.cpp_extension" in sys.modules:
            sys.modules["torch.utils.cpp_extension"].CUDA_HOME = home
    bins = [str(Path(sys.executable).parent)]
    try:
        import ninja
        bins.insert(0, ninja.BIN_DIR)
    except (ImportError, AttributeError):
        pass
    knobs.put("PATH", os.pathsep.join(bins + [str(knobs.get("PATH"))]))


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("+")[0].split(".")[:3] if p.isdigit())


@functools.lru_cache(maxsize=1)
def load() -> tuple[ModuleType | None, str]:
    """(flashinfer, where it came from) or (None, why not); asked once per process."""
    sdist, missing = knobs.get(SDIST_ENV), flashinfer_missing()
    where = "the installed package"
    if missing is not None:
        return None, missing
    if not flashinfer_installed():
        sys.modules.pop("flashinfer", None)       # a namespace package of that name imported earlier is no
                                                  # FlashInfer
        tarball = Path(str(sdist))
        if not tarball.exists():
            return None, f"${SDIST_ENV}={sdist} does not exist"
        work = Path(str(knobs.get(WORK_ENV)))
        try:
            activate(prepare_source(tarball, work), work, tarball.parent / "packaging-25.0-py3-none-any.whl")
        except (OSError, tarfile.TarError) as e:
            return None, f"${SDIST_ENV}={sdist} could not be unpacked ({e})"
        where = f"the sdist {tarball.name}"
    try:
        fi = importlib.import_module("flashinfer")
    except Exception as e:       # a broken install must cost the backend, never the run
        return None, f"import flashinfer failed ({type(e).__name__}: {str(e).splitlines()[0][:160]})"
    version = str(getattr(fi, "__version__", "unknown"))
    if not SUPPORTED[0] <= version_tuple(version if version != "unknown" else "0") < SUPPORTED[1]:
        return None, (f"FlashInfer {version} is outside the tested range "
                      f"[{'.'.join(map(str, SUPPORTED[0]))}, {'.'.join(map(str, SUPPORTED[1]))})")
    return fi, f"FlashInfer {fi.__version__} from {where}"
