"""`dcpctl launch` as a child of a benchmark script: started in its own process group, waited for until its
ready line, its stdout kept drained, stopped whatever happens (serve_spy.py, serve_trace.py).

    srv, url = start(flags, log_path, env=None)     SystemExit when it does not get ready in READY_S
    stop(srv)                                        SIGINT to its group, SIGKILL after 60 s
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

READY_S = 600.0
DCPCTL = [sys.executable, "-m", "dcpctl.cli.main"]


def start(flags: list[str], log: Path, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    srv = subprocess.Popen(DCPCTL + ["launch", "--port", "0", *flags], stdout=subprocess.PIPE,
                           stderr=open(log, "w"), text=True, start_new_session=True, env=env)
    url, t0 = None, time.monotonic()
    while url is None and time.monotonic() - t0 < READY_S and srv.poll() is None:
        line = srv.stdout.readline()
        if "serving at " in line:
            url = line.split("serving at ", 1)[1].split()[0]
    if url is None:
        stop(srv)
        raise SystemExit(f"the server did not get ready (see {log})")
    threading.Thread(target=lambda: [None for _ in srv.stdout], daemon=True).start()   # keep its pipe drained
    return srv, url


def stop(srv: subprocess.Popen) -> None:
    try:
        os.killpg(srv.pid, signal.SIGINT)
        srv.wait(60)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(srv.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
