"""FlashInfer's sdist set up for an uninstalled import (runtime/attention/flashinfer_setup.py, which
benchmarks/flashinfer_mla.py also uses); the CPU half of it.

Skipped without .vendor/flashinfer_python-0.2.14.tar.gz (tools/gpu_env.sh prepare puts it there).
"""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from benchmarks import flashinfer_mla as bench
from dcpctl.runtime.attention import flashinfer_setup as fs


def load(name: str, path: Path) -> ModuleType:
    """A module of the unpacked sdist, by file (its package is not importable as installed)."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


pytestmark = pytest.mark.skipif(not bench.TARBALL.is_file(),
                                reason=f"{bench.TARBALL} absent (run tools/gpu_env.sh prepare)")


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    work = tmp_path_factory.mktemp("flashinfer")
    return fs.prepare_source(bench.TARBALL, work), work


def test_jit_env_resolves_every_source_folder(sdist: tuple[Path, Path],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    src, work = sdist
    for k, v in fs.jit_environ(work).items():
        monkeypatch.setenv(k, v)
    # reads the environment at import
    env = load("flashinfer_jit_env_alone", src / "flashinfer" / "jit" / "env.py")
    assert (env.FLASHINFER_INCLUDE_DIR / "flashinfer" / "attention" / "mla_hopper.cuh").is_file()
    assert (env.FLASHINFER_CSRC_DIR / "batch_mla_sm90_run.cu").is_file()
    assert (env.CUTLASS_INCLUDE_DIRS[0] / "cutlass" / "cutlass.h").is_file()
    assert env.CUTLASS_INCLUDE_DIRS[1].is_dir() and env.SPDLOG_INCLUDE_DIR.is_dir()
    # sm_90a only, cache under work
    assert env.FLASHINFER_WORKSPACE_DIR == work / ".cache" / "flashinfer" / "90"


def test_prepare_source_twice_reuses_the_tree(sdist: tuple[Path, Path]) -> None:
    src, work = sdist
    assert fs.prepare_source(bench.TARBALL, work) == src
    assert sorted(p.name for p in (src / "flashinfer" / "data").iterdir()) == sorted(fs.DATA_LINKS)


def test_import_flashinfer_uninstalled(sdist: tuple[Path, Path]) -> None:
    pytest.importorskip("requests")   # flashinfer/artifacts.py imports it; the CPU venv may lack it
    src, work = sdist
    code = ("from dcpctl.runtime.attention.flashinfer_setup import load; fi, why = load(); "
            "print(fi.__version__, fi.__file__, hasattr(fi.mla, 'BatchMLAPagedAttentionWrapper'), why)")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "DCPCTL_FLASHINFER_SDIST": str(bench.TARBALL),
           "DCPCTL_FLASHINFER_WORK": str(work)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split()[:3] == ["0.2.14", str(src / "flashinfer" / "__init__.py"), "True"]
    assert "FlashInfer 0.2.14 from the sdist flashinfer_python-0.2.14.tar.gz" in r.stdout
