"""Child processes of the serving benchmarks (serve_peers, serve_mixed, fp8_serve): each part in its own
session with its log, a budget, `dcpctl launch`."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

PY = sys.executable
READY = re.compile(r"^dcpctl: serving at (\S+) ")


class Run:
    """Shared state of one benchmark run: where logs go, the budget, every part's exit status."""

    def __init__(self, out: Path, budget_s: float, smoke: bool) -> None:
        self.out, self.logs, self.t0, self.budget_s, self.smoke = (out, out / "logs", time.monotonic(),
                                                                   budget_s, smoke)
        self.logs.mkdir(parents=True, exist_ok=True)
        self.parts: list[dict[str, Any]] = []
        self.device = "cpu" if smoke else "cuda"
        self.serve_args: list[str] = []     # more `dcpctl launch` flags for every server

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.t0)

    def record(self, name: str, rc: int | None, seconds: float, note: str = "") -> None:
        self.parts.append({"part": name, "rc": rc, "seconds": round(seconds, 1),
                           **({"note": note} if note else {})})
        print(f"[serve_peers {time.monotonic() - self.t0:6.0f}s] {name}: rc={rc} ({seconds:.1f} s) {note}",
              file=sys.stderr, flush=True)

    def cmd(self, name: str, argv: list[str], timeout: float | None = None) -> tuple[int | None, str]:
        """Run argv with its stderr in logs/NAME.log; (exit status or None when skipped/timed out, stdout)."""
        if self.left() < 5:
            self.record(name, None, 0, "skipped: budget spent")
            return None, ""
        t0 = time.monotonic()
        with open(self.logs / f"{name}.log", "w") as log:
            p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)
            try:
                stdout, _ = p.communicate(timeout=min(timeout or 1e9, max(5.0, self.left())))
                rc = p.returncode
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)   # our child's own session: its spawned ranks, compile
                                                   # workers
                stdout, rc = p.communicate()[0], None
                log.write("\n[serve_peers] timed out: killed\n")
        self.record(name, rc, time.monotonic() - t0, "" if rc is not None else "timed out")
        return rc, stdout


def dcpctl(*args: str) -> list[str]:
    return [PY, "-m", "dcpctl.cli.main", *args]


def bench(name: str, *args: str) -> list[str]:
    """The argv of benchmarks/<name>.py as a module (the child runs from the repository root, as this one)."""
    return [PY, "-m", f"benchmarks.{name}", *args]


class Server:
    """`dcpctl launch` as a child in its own session; its stdout and stderr go to one log file."""

    def __init__(self, argv: list[str], log: Path, timeout: float) -> None:
        self.t0 = time.monotonic()
        self.log = open(log, "w")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     start_new_session=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        self.url, self.ready_s, ready = "", None, threading.Event()
        threading.Thread(target=self._pump, args=(ready,), daemon=True).start()
        ready.wait(timeout)

    def _pump(self, ready: threading.Event) -> None:
        for line in self.proc.stdout:
            self.log.write(line)
            m = READY.match(line)
            if m and not self.url:
                self.url, self.ready_s = m.group(1), time.monotonic() - self.t0
                ready.set()
        ready.set()   # the launcher ended (or closed stdout) without a ready line

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(45)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)   # our own child's session: its torchrun and ranks
            rc = self.proc.wait()
        self.log.close()
        return rc
