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
