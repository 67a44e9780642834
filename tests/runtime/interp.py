"""Run a check script under Triton's interpreter, in its own process (Triton reads TRITON_INTERPRET at import).

Its budget is CPU seconds, not wall seconds: on a loaded machine (8 agents on 2 cores) a check that needs 100 s of
CPU takes several times that on the clock, and a wall-clock limit failed checks that were only waiting for a
core.  A hang burns no CPU, so the wall clock still ends it, at HANG_FACTOR times the budget.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HANG_FACTOR = 6


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a running process and its reaped children (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def run_on_cpu_budget(argv: list[str], env: dict[str, str], budget_s: float) -> subprocess.CompletedProcess:
    """Run argv; fail when it has used more than `budget_s` of CPU, or HANG_FACTOR x that on the clock."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    start, used = time.monotonic(), 0.0
    while proc.poll() is None:
        try:
            used = cpu_seconds(proc.pid)
        except (OSError, ValueError):
            pass
        if used > budget_s or time.monotonic() - start > HANG_FACTOR * budget_s:
            proc.kill()
            out = proc.communicate()[0]
            pytest.fail(f"{argv[-1]}: {used:.0f} s of CPU in {time.monotonic() - start:.0f} s (budget {budget_s:.0f} s "
                        f"of CPU):\n{out[-3000:]}")
        time.sleep(0.5)
    out = proc.communicate()[0]
    return subprocess.CompletedProcess(argv, proc.returncode, out, "")


def run_in_interpreter(script: str, budget_s: float = 300) -> None:
    """`script` (a path from the repository root) exits 0 with TRITON_INTERPRET=1; its output is the failure text."""
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    r = run_on_cpu_budget([sys.executable, str(ROOT / script)], env, budget_s)
    assert r.returncode == 0, r.stdout


def patch_index() -> None:
    """Let Triton's interpreter take `range` over loaded runtime ints: numpy >= 2.4 refuses int() of a 1-element
    array, which the interpreter does for a tensor's __index__.  Call in a check script before its kernels run."""
    import triton.runtime.interpreter as ti
    patch = ti._patch_lang_tensor

    def patched(tensor, scope):
        patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))
    ti._patch_lang_tensor = patched
