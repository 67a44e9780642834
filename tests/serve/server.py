"""Start `dcpctl launch --port 0` as a subprocess, read its ready line, always tear it down."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

READY = re.compile(r"^dcpctl: serving at (\S+) ")


class Server:
    def __init__(self, *args: str, timeout: float = 120.0) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        env.pop("DCPCTL_API_KEY", None)
        self.proc = subprocess.Popen([sys.executable, "-m", "dcpctl.cli.main", "launch", "--port", "0",
                                      *args],
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self._ready = threading.Event()
        self.url = ""
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.stdout, True), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr, False), daemon=True).start()
        if not self._ready.wait(timeout) or not self.url:
            self.stop()
            raise RuntimeError(f"server did not become ready: {''.join(self.stderr)[-2000:]}")

    def _pump(self, stream, sink: list[str], watch: bool) -> None:
        for line in stream:
            sink.append(line)
            m = READY.match(line) if watch else None
            if m:
                self.url = m.group(1)
                self._ready.set()
        if watch:
            self._ready.set()

    def stop(self, timeout: float = 30.0) -> tuple[int, float]:
        """SIGTERM the launcher; (exit status, seconds it took). Kills it if it overstays."""
        t0 = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        return rc, time.monotonic() - t0

    def worker_pids(self) -> dict[int, int]:
        """RANK -> pid of this server's worker processes (descendants of the launcher)."""
        out, todo = {}, [self.proc.pid]
        while todo:
            pid = todo.pop()
            try:
                children = open(f"/proc/{pid}/task/{pid}/children").read().split()
            except OSError:
                continue
            for c in map(int, children):
                todo.append(c)
                try:
                    env = open(f"/proc/{c}/environ", "rb").read().split(b"\0")
                except OSError:
                    continue
                ranks = [e[5:] for e in env if e.startswith(b"RANK=")]
                if ranks and b"dcpctl.runtime.worker" in open(f"/proc/{c}/cmdline", "rb").read():
                    out[int(ranks[0])] = c
        return out



def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, None once it is gone."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()
    except OSError:
        return None
    return fields[0], int(fields[1])


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, grandchildren, ...)."""
    parents = {int(p): st[1] for p in os.listdir("/proc") if p.isdigit() and (st := _stat(int(p)))}
    out, todo = [], [pid]
    while todo:
        at = todo.pop()
        kids = [c for c, parent in parents.items() if parent == at]
        out += kids
        todo += kids
    return out


def running(pids: list[int]) -> list[int]:
    """The pids of `pids` still running (a zombie has ended)."""
    return [p for p in pids if (st := _stat(p)) is not None and st[0] != "Z"]
