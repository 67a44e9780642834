"""benchmarks/, tools/ and scripts/ run from a fresh clone as modules (`python -m benchmarks.NAME`): every
module imports by its package path, and nothing edits sys.path to find a sibling."""
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("benchmarks", "tools", "scripts")
# modules that run inside an engine's own venv (they import vllm or sglang at module level)
ENGINE_VENV = re.compile(r"^benchmarks\.(vllm\.(vllm_cpu|vllm_grid_worker|dump_flags)"
                         r"|sglang\.(grid_worker|dump_args))$")


def _modules() -> list[str]:
    names = []
    for pkg in PACKAGES:
        mod = importlib.import_module(pkg)
        names += [m.name for m in pkgutil.walk_packages(mod.__path__,
                                                        f"{pkg}.") if not ENGINE_VENV.match(m.name)]
    return sorted(names)


def test_no_file_edits_sys_path():
    files = [p for d in (*PACKAGES, "tests") for p in sorted((ROOT / d).rglob("*.py"))]
    edits = [f"{p.relative_to(ROOT)}:{n}" for p in files
             for n, line in enumerate(p.read_text().splitlines(),
                                      1) if re.search(r"sys\.path\.(insert|append)", line)
             and p != Path(__file__).resolve()]
    assert edits == []


@pytest.mark.parametrize("name", _modules())
def test_module_imports_by_its_package_path(name):
    importlib.import_module(name)     # a sibling imported without its package: ModuleNotFoundError
