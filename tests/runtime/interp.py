"""Run a check script under Triton's interpreter, in its own process (Triton reads TRITON_INTERPRET at import)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_in_interpreter(script: str, timeout: float = 300) -> None:
    """`script` (a path from the repository root) exits 0 with TRITON_INTERPRET=1; its output is the failure text."""
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, str(ROOT / script)], env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr


def patch_index() -> None:
    """Let Triton's interpreter take `range` over loaded runtime ints: numpy >= 2.4 refuses int() of a 1-element
    array, which the interpreter does for a tensor's __index__.  Call in a check script before its kernels run."""
    import triton.runtime.interpreter as ti
    patch = ti._patch_lang_tensor

    def patched(tensor, scope):
        patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))
    ti._patch_lang_tensor = patched
