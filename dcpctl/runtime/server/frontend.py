"""Rank 0's HTTP server in a process of its own, so token streaming never holds the engine loop's GIL.

    engine process (rank 0)                         frontend process (spawned)
    run_loop(engine, group, Frontend) ------------- Bridge + HttpServer (uvicorn, asyncio)
      take()     <- ("control", new, cancel)         pump thread: bridge.take() -> send
      deliver() + on_step() -> ("step", events, stats, step_s, exchange_s, kda)  receiver: bridge.deliver, metrics
      fail(msg)  -> ("fail", msg)                    every open request ends with that error
      stop()     -> ("stop",)                        the HTTP server stops, the process exits

Why: with HTTP in a thread of the engine process, each streamed token's Python (queue, SSE encoding,
uvicorn) competed with the decode loop for the GIL, so at 32 concurrent streams a served step took ~3x the
engine's own step (docs/benchmarks-serve.md).  The pipe is a socketpair private to the two processes
(multiprocessing.Pipe); messages are pickled dataclasses of this package.  The frontend exits when the pipe
closes (the engine died), so it never outlives rank 0.
"""
from __future__ import annotations

import multiprocessing as mp
import signal
import threading
import time
from dataclasses import dataclass
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
    context_len: int
    capacity: int
    attn_tp_size: int
    max_outstanding: int
    kda: bool
    created: int
    kv_extra: int = 0          # speculative verification rows per request (the fits rule counts them)


class Frontend:
    """The engine side: the run_loop bridge API (take / deliver / fail / stop_requested) over the pipe."""

    def __init__(self, spec: FrontendSpec) -> None:
        ctx = mp.get_context("spawn")          # the engine process holds CUDA and NCCL threads: never fork it
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=frontend_main, args=(child, spec), name="dcpctl-http", daemon=True)
        self.proc.start()
        child.close()
        self.stop_requested = False
        self.error: str | None = None
        self._told_stopping = False
        self.url = self._wait_ready()

    def _wait_ready(self) -> str:
        if not self.conn.poll(START_TIMEOUT_S):
            self.proc.kill()
            raise RuntimeError(f"the HTTP frontend did not start within {START_TIMEOUT_S:.0f} s")
        kind, value = self.conn.recv()
        if kind != "ready":
            raise RuntimeError(f"the HTTP frontend failed to start: {value}")
        return value

    def take(self, wait: bool) -> Control:
        from dcpctl.runtime.server.bridge import IDLE_WAIT_S
        if self.stop_requested and not self._told_stopping:
            self._send(("stopping",))
            self._told_stopping = True
        msg = Control(shutdown=self.stop_requested)
        timeout = IDLE_WAIT_S if wait else 0.0
        while self.conn.poll(timeout):
            kind, *rest = self.conn.recv()
            if kind == "control":
                msg.new += rest[0]
                msg.cancel += rest[1]
            timeout = 0.0
        msg.shutdown = self.stop_requested
        return msg

    def deliver(self, events: list[Event]) -> None:
        """Nothing here: run_loop hands the same events to on_step, which sends them with the step's stats."""

    def on_step(self, events: list[Event], stats: list[ReplicaStats], step_s: float, exchange_s: float = 0.0,
                kda: tuple[int, int] | None = None) -> None:
        self._send(("step", events, stats, step_s, exchange_s, kda))   # one message per step

    def fail(self, message: str) -> None:
        self.error = message
        self._send(("fail", message))

    def stop(self) -> None:
        self._send(("stop",))
        self.proc.join(STOP_TIMEOUT_S)
        if self.proc.is_alive():
            self.proc.kill()
        self.conn.close()

    def _send(self, item: tuple) -> None:
        try:
            self.conn.send(item)
        except (BrokenPipeError, EOFError, OSError):   # the frontend is gone; the engine finds out via stop()
            pass


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
        _receive(conn, bridge, metrics, figures)
    finally:
        http.stop(timeout=1.0)


def _start(spec: FrontendSpec) -> tuple[Any, Any, "_EngineFigures", Any]:
    from dcpctl.runtime.server.app import build_app
    from dcpctl.runtime.server.bridge import Bridge
    from dcpctl.runtime.server.gen import ServerState
    from dcpctl.runtime.server.http import HttpServer
    from dcpctl.runtime.server.metrics import Metrics
    from dcpctl.runtime.tokenizer import load_tokenizer
    bridge = Bridge(spec.max_outstanding)
    figures = _EngineFigures()
    metrics = Metrics(spec.attn_tp_size, lambda: figures.exchange_s, figures if spec.kda else None)
    state = ServerState(bridge, load_tokenizer(spec.model_path), spec.model_name, spec.vocab_size,
                        spec.context_len, spec.capacity, metrics, spec.api_key, spec.max_request_bytes,
                        spec.created, allowed_hosts=spec.allowed_hosts, kv_extra=spec.kv_extra)
    return bridge, metrics, figures, HttpServer(build_app(state), spec.host, spec.port).start()


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
        if msg.new or msg.cancel:
            try:
                conn.send(("control", msg.new, msg.cancel))
            except (BrokenPipeError, OSError):
                return


def _receive(conn: Any, bridge: Any, metrics: Any, figures: _EngineFigures) -> None:
    while True:
        try:
            kind, *rest = conn.recv()
        except (EOFError, OSError):        # the engine process is gone
            bridge.fail("the engine stopped; the server log has the detail")
            time.sleep(0.2)
            return
        if kind == "step":
            events, stats, step_s, exchange_s, kda = rest
            bridge.deliver(events)
            metrics.on_step(events, stats, step_s)
            figures.exchange_s = exchange_s
            if kda is not None:
                figures.used, figures.free = kda
        elif kind == "fail":
            bridge.fail(rest[0])
        elif kind == "stopping":
            bridge.stop_requested = True
        elif kind == "stop":
            return
