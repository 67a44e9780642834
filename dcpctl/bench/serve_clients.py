"""The client side of `dcpctl bench serve`: streamed requests over client processes, so that parsing tokens
does not bunch the arrival stamps being measured (one Python process parses ~10k SSE events a second)."""
from __future__ import annotations

import http.client
import json
import queue
import threading
import time
from typing import Any, Callable
from urllib.parse import urlparse

from dcpctl.bench.serve_load import Sample


def _one(url: str, headers: dict[str, str], body: dict[str, Any], timeout: float,
         first: Callable[[], None] = lambda: None) -> Sample:
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
    t0 = time.perf_counter()
    try:
        conn.request("POST", (u.path.rstrip("/") or "") + "/v1/completions", json.dumps(body), headers)
        resp = conn.getresponse()
        if resp.status != 200:
            return Sample(False, error=f"HTTP {resp.status}: {resp.read()[:200]!r}")
        stamps, tokens = [], 0
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices"):
                stamps.append(time.perf_counter())
                if len(stamps) == 1:
                    first()
            elif chunk.get("usage"):
                tokens = int(chunk["usage"]["completion_tokens"])
        if not stamps:
            return Sample(False, error="no tokens streamed")
        itl = [b - a for a, b in zip(stamps, stamps[1:])]
        return Sample(True, stamps[0] - t0, itl, stamps[-1] - t0, tokens or len(stamps))
    except (OSError, http.client.HTTPException, ValueError) as e:
        return Sample(False, error=f"{type(e).__name__}: {e}")
    finally:
        conn.close()


STREAMS_PER_PROCESS = 8   # client threads per process: one Python process parses ~10k SSE events a second


def client_processes(concurrency: int, given: int) -> int:
    """How many client processes share the streams: `given`, or one per STREAMS_PER_PROCESS streams (0)."""
    return max(1, min(concurrency, given or -(-concurrency // STREAMS_PER_PROCESS)))


def _client_main(url: str, headers: dict[str, str], bodies: list[dict[str, Any]], threads: int,
                 timeout: float, todo: Any, done: Any) -> None:
    """One client process: `threads` streams, each taking the next request index until a None; (i, None) on
    done says request i streamed its first token, (i, Sample) that it ended."""
    def stream() -> None:
        while (i := todo.get()) is not None:
            done.put((i, _one(url, headers, bodies[i], timeout, lambda: done.put((i, None)))))
    workers = [threading.Thread(target=stream, daemon=True) for _ in range(threads)]
    done.put(None)                          # this process is up: the clock starts when all are
    for t in workers:
        t.start()
    for t in workers:
        t.join()


class Clients:
    """Client processes over two queues: the arrivals' (`concurrency` streams) and the background's."""

    def __init__(self, url: str, headers: dict[str, str], bodies: list[dict[str, Any]], concurrency: int,
                 background: int, timeout: float, processes: int) -> None:
        import multiprocessing as mp
        ctx = mp.get_context("spawn")
        self.todo, self.todo_bg, self.done = ctx.Queue(), ctx.Queue(), ctx.Queue()
        self.n_proc = client_processes(concurrency, processes)
        plan = [(self.todo, concurrency // self.n_proc + (i < concurrency % self.n_proc))
                for i in range(self.n_proc)]
        if background:
            n_bg = client_processes(background, 0)
            plan += [(self.todo_bg, background // n_bg + (i < background % n_bg)) for i in range(n_bg)]
        self.procs = [ctx.Process(target=_client_main, args=(url, headers, bodies, k, timeout, q, self.done),
                                  daemon=True) for q, k in plan]
        self.plan = plan
        for p in self.procs:
            p.start()
        for _ in self.procs:
            self.done.get()

    def stop(self) -> None:
        for q, k in self.plan:
            for _ in range(k):
                q.put(None)
        for p in self.procs:
            p.join()


def take(done: Any, samples: dict[int, Sample], wait: float | None, advance: Callable[[], None]) -> set[int]:
    """One message from the clients (waiting at most `wait` s): a finished sample is stored; returns the
    requests that just streamed their first token."""
    try:
        i, s = done.get(timeout=wait)
    except queue.Empty:
        return set()
    if s is None:
        return {i}
    samples[i] = s
    advance()
    return set()


