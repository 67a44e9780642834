"""Rank 0's HTTP server in processes of its own, so token streaming never holds the engine loop's GIL.

    engine process (rank 0)                         frontend processes (`python -c`; spec.workers of them)
    run_loop(engine, group, Frontend) ------------- Bridge + HttpServer (uvicorn, asyncio) each
      take()     <- ("control", new, cancel, ended)  pump thread: bridge.take() -> send
      deliver() + on_step() -> ("step", event rows, stats, step_s, exchange_s, kda, ended)   to every worker:
                                                     receiver: bridge.deliver (own ids), metrics (all)
      fail(msg)  -> ("fail", msg)                    every open request ends with that error
      stop()     -> ("stop",)                        the HTTP server stops, the process exits
      (start)    -> ("serving",)                     once every worker is up: /health answers ok from then on

Why: with HTTP in a thread of the engine process, each streamed token's Python (queue, SSE encoding,
uvicorn) competed with the decode loop for the GIL, so at 32 concurrent streams a served step took ~3x the
engine's own step (docs/benchmarks.md).  One HTTP process in turn spends ~70 us of CPU per streamed
token (68 us at 32 streams on the H200 machine, most of it the socket write): at 32 streams of a 1.1 ms step
(29k tokens a second) it falls behind and the stream arrives in bursts, hence --tokenizer-worker-num (SGLang's
name) processes on one port. Each pipe is a socketpair private to two processes, read and written as a
multiprocessing Connection; messages are pickled dataclasses of this package, except a step's events, which go
as (rid, token, logprob, finish) tuples (pickled ~3x faster: at 32 streams rank 0 pickled 32 Event objects in
~76 us a step on the CPU machine, tuples in ~25). A frontend exits when its pipe closes (the engine died), so
it never outlives rank 0; a worker that dies takes its share of the port with it, and the engine goes on with
the others (it fails when none is left).
"""
from __future__ import annotations

import multiprocessing.connection as mp_connection
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from multiprocessing.reduction import ForkingPickler
from typing import Any

from dcpctl.runtime.engine.events import Event, ReplicaStats
from dcpctl.runtime.server.control import Control

START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 2.0     # rank 0's shutdown waits this long for the frontend, then kills it


@dataclass(frozen=True)
class FrontendSpec:
    """Everything the frontend process needs (picklable; no engine object crosses)."""

    host: str
    port: int
    api_key: str | None
    max_request_bytes: int
    allowed_hosts: tuple[str, ...] | None
    model_name: str
    model_path: str
    vocab_size: int
    context_len: int           # the served context: --context-length, else max_position_embeddings
    capacity: int
    attn_tp_size: int
    max_outstanding: int
    kda: bool
    created: int
    kv_extra: int = 0          # speculative verification rows per request (the fits rule counts them)
    workers: int = 1           # HTTP processes on the port (--tokenizer-worker-num)
    worker: int = 0            # this process's index: its request ids are worker + k * workers
    health_timeout_s: float = 20.0   # /health's one-token generation waits this long (--health-check-timeout)
    limits: Any = None               # connection.ConnectionLimits (None: its defaults)
    keepalive_s: float = 15.0        # a waiting stream's SSE comment interval (--sse-keepalive-interval)
    json_options: tuple[tuple[str, Any], ...] = ()   # JSON grammars' whitespace (--constrained-json-*)


class Frontend:
    """The engine side: the run_loop bridge API (take / deliver / fail / stop_requested) over the pipes.

    spec.workers HTTP processes share the port (SO_REUSEPORT: the kernel spreads connections over them);
    worker 0 binds first, so `port 0` resolves once.  Every step's message goes to every worker (one pickle):
    a worker delivers the events of its own request ids and counts all of them, so /metrics agrees whichever
    worker answers it; the finishes a worker decides itself (stop strings, clients gone) are echoed to the
    rest.
    """

    def __init__(self, spec: FrontendSpec) -> None:
        self.stop_requested = False
        self.error: str | None = None
        self._told_stopping = False
        self._ended: list[tuple[int, str]] = []     # (worker, finish reason) to echo with the next step
        first = _Worker(spec)
        self.url = first.wait_ready()
        port = int(self.url.rsplit(":", 1)[1])
        rest = [_Worker(replace(spec, port=port, worker=i)) for i in range(1, spec.workers)]
        for w in rest:
            w.wait_ready()
        self.workers = [first] + rest
        self._send(("serving",))   # every worker is up: /health may say ok (worker 0 answered 503 until now)
        self.gone: list[_Worker] = []

    def take(self, wait: bool) -> Control:
        from dcpctl.runtime.server.bridge import IDLE_WAIT_S
        if self.stop_requested and not self._told_stopping:
            self._send(("stopping",))
            self._told_stopping = True
        msg = Control()
        timeout = IDLE_WAIT_S if wait else 0.0
        by_conn = {w.conn: w for w in self.workers}
        while ready := mp_connection.wait(list(by_conn), timeout):
            for conn in ready:
                try:
                    kind, *rest = conn.recv()
                except (EOFError, OSError):
                    self._lost(by_conn.pop(conn))
                    continue
                if kind == "control":
                    msg.new += rest[0]
                    msg.cancel += rest[1]
                    self._ended += [(by_conn[conn].index, r) for r in rest[2]]
            timeout = 0.0
        msg.shutdown = self.stop_requested
        return msg

    def _lost(self, w: "_Worker") -> None:
        """A worker died: its port share closes with it and the others keep serving; with none left the server
        has failed (the engine loop raises, as it did when the one frontend died)."""
        from dcpctl.runtime.notes import stderr_line
        self.workers.remove(w)
        self.gone.append(w)
        status = w.proc.wait()
        if not self.workers:
            raise RuntimeError(f"every HTTP worker exited (the last, {w.index}, with status {status})")
        stderr_line(f"dcpctl: HTTP worker {w.index} exited (status {status}); {len(self.workers)} left")

    def deliver(self, events: list[Event]) -> None:
        """Nothing here: run_loop hands the same events to on_step, which sends them with the step's stats."""

    def on_step(self, events: list[Event], stats: list[ReplicaStats], step_s: float, exchange_s: float = 0.0,
                kda: tuple[int, int] | None = None) -> None:
        ended, self._ended = self._ended, []
        rows = [(e.rid, e.token, e.logprob, e.finish) for e in events]   # tuples pickle ~3x faster than Event
        self._send(("step", rows, stats, step_s, exchange_s, kda, ended))   # one message per step

    def fail(self, message: str) -> None:
        self.error = message
        self._send(("fail", message))

    def stop(self) -> None:
        self._send(("stop",))
        for w in self.workers + self.gone:
            w.stop()

    def _send(self, item: tuple) -> None:
        data = bytes(ForkingPickler.dumps(item))
        for w in self.workers:
            try:
                w.conn.send_bytes(data)
            except (BrokenPipeError, EOFError, OSError):   # that worker is gone; the engine finds out via
                                                           # stop()
                pass


class _Worker:
    """One HTTP process and the engine's end of its pipe.

    A plain `python -c` child, not multiprocessing's spawn: spawn would re-import the parent's main module
    (the rank's worker: torch, the engine, the models) in every HTTP process."""

    def __init__(self, spec: FrontendSpec) -> None:
        self.index = spec.worker
        mine, theirs = socket.socketpair()
        code = f"from dcpctl.runtime.server.frontend import child_main; child_main({theirs.fileno()})"
        self.proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=[theirs.fileno()])
        theirs.close()
        self.conn = mp_connection.Connection(mine.detach())
        self.conn.send(spec)

    def wait_ready(self) -> str:
        if not self.conn.poll(START_TIMEOUT_S):
            self.proc.kill()
            raise RuntimeError(f"the HTTP frontend did not start within {START_TIMEOUT_S:.0f} s")
        try:
            kind, value = self.conn.recv()
        except EOFError:
            raise RuntimeError(f"the HTTP frontend exited at start (status {self.proc.wait()})") from None
        if kind != "ready":
            raise RuntimeError(f"the HTTP frontend failed to start: {value}")
        return value

    def stop(self) -> None:
        try:
            self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.conn.close()


def child_main(fd: int) -> None:
    """Entry of an HTTP process: its spec is the pipe's first message."""
    conn = mp_connection.Connection(fd)
    frontend_main(conn, conn.recv())


def frontend_main(conn: Any, spec: FrontendSpec) -> None:
    """The frontend process: serve HTTP until the engine says stop or the pipe closes."""
    for sig in (signal.SIGINT, signal.SIGTERM):  # Ctrl-C reaches the whole process group: rank 0 decides
        signal.signal(sig, signal.SIG_IGN)
    try:
        bridge, metrics, figures, http = _start(spec)
    except BaseException as e:  # noqa: BLE001 - the engine process reports it as one line
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", http.url))
    threading.Thread(target=_pump, args=(bridge, conn), name="dcpctl-pump", daemon=True).start()
    try:
        _receive(conn, bridge, metrics, figures, spec.worker)
    finally:
        http.stop(timeout=1.0)


def _start(spec: FrontendSpec) -> tuple[Any, Any, "_EngineFigures", Any]:
    from dcpctl.runtime.server.app import build_app
    from dcpctl.runtime.server.bridge import Bridge
    from dcpctl.runtime.server.gen import ServerState
    from dcpctl.runtime.server.http import HttpServer
    from dcpctl.runtime.server.metrics import Metrics
    from dcpctl.runtime.server.prime import prime
    from dcpctl.runtime.tokenizer import load_tokenizer
    bridge = Bridge(spec.max_outstanding, spec.worker, spec.workers,
                    on_finish=lambda reason: metrics.finished.labels(reason).inc())
    figures = _EngineFigures()
    metrics = Metrics(spec.attn_tp_size, lambda: figures.exchange_s, figures if spec.kda else None,
                      open_requests=lambda: bridge.open_requests)
    state = ServerState(bridge, load_tokenizer(spec.model_path), spec.model_name, spec.vocab_size,
                        spec.context_len, spec.capacity, metrics, spec.api_key, spec.max_request_bytes,
                        spec.created, allowed_hosts=spec.allowed_hosts, kv_extra=spec.kv_extra,
                        health_timeout_s=spec.health_timeout_s, model_path=spec.model_path,
                        keepalive_s=spec.keepalive_s, json_options=dict(spec.json_options))
    app = build_app(state)
    bridge.starting = True         # until the engine's "serving": worker 0 listens while its siblings start
    prime(app, spec.api_key)       # every route once, in process: the first client pays nothing lazy
                                   # (prime.py)
    from dcpctl.runtime.server.connection import ConnectionLimits
    http = HttpServer(app, spec.host, spec.port, reuse_port=spec.workers > 1,
                      limits=spec.limits or ConnectionLimits())
    return bridge, metrics, figures, http.start()


class _EngineFigures:
    """What the engine last reported beyond its events: DCP exchange seconds and rank 0's KDA state slots
    (used/free: the metrics gauges read them as they read the engine's pool in a single process)."""
    exchange_s = 0.0
    used = 0
    free = 0


def _pump(bridge: Any, conn: Any) -> None:
    # new and cancelled requests, as the HTTP side queues them, to the engine
    while True:
        msg = bridge.take(wait=True)
        ended = bridge.take_ended()
        if msg.new or msg.cancel or ended:
            try:
                conn.send(("control", msg.new, msg.cancel, ended))
            except (BrokenPipeError, OSError):
                return


def _receive(conn: Any, bridge: Any, metrics: Any, figures: _EngineFigures, me: int) -> None:
    while True:
        try:
            kind, *rest = conn.recv()
        except (EOFError, OSError):        # the engine process is gone
            bridge.fail("the engine stopped; the server log has the detail")
            time.sleep(0.2)
            return
        if kind == "step":
            rows, stats, step_s, exchange_s, kda, ended = rest
            events = [Event(*r) for r in rows]
            bridge.deliver(events)              # the events of other workers' requests find no stream here
            metrics.on_step(events, stats, step_s)
            for worker, reason in ended:
                if worker != me:                # that worker counted its own already
                    metrics.finished.labels(reason).inc()
            figures.exchange_s = exchange_s
            if kda is not None:
                figures.used, figures.free = kda
        elif kind == "fail":
            bridge.fail(rest[0])
        elif kind == "stopping":
            bridge.stop_requested = True
        elif kind == "serving":
            bridge.starting = False
        elif kind == "stop":
            return
