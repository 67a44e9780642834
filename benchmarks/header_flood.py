"""What keyless oversized headers cost a server: the HTTP process's CPU per 64 MB header, and the inter-token
latency of an authorized stream with and without four such headers a second.

    python -m benchmarks.header_flood [--rounds 3] [-- LAUNCH FLAGS...]

Starts `dcpctl launch --api-key k LAUNCH FLAGS` (the built-in model unless the flags say otherwise), finds its
HTTP worker process, and prints one JSON line: CPU milliseconds per header (20 headers), then per round the
ITL median / p90 / max of an 80-token stream alone and under the headers (tests/serve/test_connections.py
asserts the same bounds on the CPU machine).
"""
from __future__ import annotations

import argparse
import json
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx

KEY = {"Authorization": "Bearer k"}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a running process (Linux /proc)."""
    import os
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return sum(int(f) for f in fields[11:13]) / os.sysconf("SC_CLK_TCK")


def frontend_pid(launcher: int) -> int:
    """The HTTP worker process under a launcher (runtime/server/frontend.py)."""
    todo = [launcher]
    while todo:
        pid = todo.pop()
        try:
            kids = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except OSError:
            continue
        for c in kids:
            if b"frontend" in Path(f"/proc/{c}/cmdline").read_bytes():
                return c
            todo.append(c)
    raise RuntimeError("no HTTP worker process found")


def big_header(addr: tuple[str, int], size: int = 64 << 20) -> bytes:
    """A keyless request whose header grows to `size` bytes; what came back before the server closed."""
    with socket.create_connection(addr, timeout=30) as sock:
        try:
            sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\nX-Big: ")
            chunk = b"a" * (1 << 20)
            for _ in range(size // len(chunk)):
                sock.sendall(chunk)
        except OSError:
            pass
        try:
            return sock.recv(4096)
        except OSError:
            return b""


def streamed_itl(url: str, n: int = 40) -> list[float]:
    """The gaps between an n-token stream's chunks, sorted."""
    body = {"prompt": "def ", "max_tokens": n, "ignore_eos": True, "temperature": 0, "stream": True}
    times = []
    with httpx.stream("POST", url + "/v1/completions", json=body, headers=KEY, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                times.append(time.monotonic())
    return sorted(b - a for a, b in zip(times, times[1:]))


def under_headers(url: str, addr: tuple[str, int], n: int = 40, every_s: float = 0.25) -> list[float]:
    """streamed_itl while a keyless 64 MB header arrives every `every_s` seconds."""
    stop = threading.Event()

    def attack() -> None:
        while not stop.wait(every_s):
            big_header(addr)
    t = threading.Thread(target=attack)
    t.start()
    try:
        return streamed_itl(url, n)
    finally:
        stop.set()
        t.join()


def _ms(gaps: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(gaps) * 1e3, 1), "p90": round(gaps[int(len(gaps) * 0.9)] * 1e3, 1),
            "max": round(gaps[-1] * 1e3, 1)}


def main(argv: list[str] | None = None) -> int:
    from benchmarks.serve_launch import start, stop
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("launch", nargs="*", help="flags for `dcpctl launch` (after --)")
    args = ap.parse_args(argv)
    srv, url = start(["--api-key", "k", *args.launch], Path(tempfile.gettempdir()) / "dcpctl-header-flood.log")
    try:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        addr, fe = (host, int(port)), frontend_pid(srv.pid)
        before = cpu_seconds(fe)
        for _ in range(20):
            big_header(addr)
        time.sleep(0.3)
        out = {"cpu_ms_per_64mb_header": round((cpu_seconds(fe) - before) / 20 * 1e3, 1), "rounds": []}
        for _ in range(args.rounds):
            out["rounds"].append({"quiet": _ms(streamed_itl(url, 80)), "headers": _ms(under_headers(url, addr, 80))})
    finally:
        stop(srv)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
