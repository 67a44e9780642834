"""Hand-over between rank 0's HTTP thread (asyncio) and the engine loop (main thread).

HTTP side: `open()` registers a request and returns its asyncio.Queue of events; `cancel()` asks
the engine to drop it.  Engine side: `take()` collects the next Control message (waiting a short
while when idle, so an idle server does not spin), `deliver()` routes events to their queues with
loop.call_soon_threadsafe, `fail()` ends every open request with an error.

A request is counted finished exactly once, by whichever closes its stream first under the lock: the
engine's finish (deliver) or this side's cancel (a stop string, a client gone).  A client that leaves
as its last token arrives is therefore one `length` or one `abort`, never both.  The finish reasons
are also kept for the other HTTP workers (take_ended), whose /metrics count them too.  `/health`'s
probes (`open(probe=True)`) get negative ids and are never counted, as SGLang's health check is not.
"""
from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from dcpctl.runtime.engine.events import Event
from dcpctl.runtime.engine.request import SamplingParams
from dcpctl.runtime.server.control import Control, NewRequest

IDLE_WAIT_S = 0.2   # the idle heartbeat: how long rank 0 waits for work before broadcasting "nothing"
GONE = object()     # put on a request's queue when its client went away (gen.py)


class Overloaded(Exception):
    """The bounded queue is full (HTTP 503)."""


class EngineDead(Exception):
    """The engine loop failed; the message says why (HTTP 503)."""


@dataclass(frozen=True)
class Failure:
    message: str


@dataclass
class _Stream:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue


class Bridge:
    """`worker` of `workers` HTTP processes (frontend.py): its request ids are worker, worker + workers,
    ..."""

    def __init__(self, max_outstanding: int, worker: int = 0, workers: int = 1,
                 on_finish: Callable[[str], None] = lambda reason: None) -> None:
        self.max_outstanding = max_outstanding
        self.on_finish = on_finish   # counts one finished request (metrics.py)
        self._inbox: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._streams: dict[int, _Stream] = {}
        self._lock = threading.Lock()
        self._rids = itertools.count(worker, workers)
        self._echo = workers > 1      # finish reasons to hand the other workers (take_ended)
        self._ended: list[str] = []   # finish reasons counted here, for the other workers (take_ended)
        self.stop_requested = False
        self.error: str | None = None
        self.starting = False      # an HTTP worker up before its siblings: /health says 503 until the engine
                                   # serves
        self.last_output = 0.0     # time.monotonic() of the last step that delivered any token (health.py)

    # ---- HTTP side (any event-loop thread) ----
    @property
    def open_requests(self) -> int:
        return len(self._streams)

    def open(self, prompt: list[int], params: SamplingParams,
             probe: bool = False) -> tuple[int, asyncio.Queue]:
        if self.error is not None:
            raise EngineDead(self.error)
        if self.stop_requested:
            raise EngineDead("the server is shutting down")
        stream = _Stream(asyncio.get_running_loop(), asyncio.Queue())
        with self._lock:
            if len(self._streams) >= self.max_outstanding:
                raise Overloaded(f"{len(self._streams)} requests are queued or running "
                                 f"(limit {self.max_outstanding}); retry later")
            rid = next(self._rids)
            rid = -1 - rid if probe else rid
            self._streams[rid] = stream
        self._inbox.put(("new", NewRequest(rid, prompt, params)))
        return rid, stream.queue

    def cancel(self, rid: int, reason: str = "abort") -> bool:
        """Drop `rid` (this side ended it: "stop" or "abort"); False when the engine had finished it
        already."""
        with self._lock:
            known = self._streams.pop(rid, None) is not None
            if known:
                self._finished(rid, reason)
        if known:
            self._inbox.put(("cancel", rid))
        return known

    def _finished(self, rid: int, reason: str) -> None:
        # under the lock, once per request: the stream was just removed
        if rid >= 0:
            if self._echo:
                self._ended.append(reason)
            self.on_finish(reason)

    def take_ended(self) -> list[str]:
        """The finish reasons counted here since the last call (the other HTTP workers count them too)."""
        with self._lock:
            ended, self._ended = self._ended, []
        return ended

    # ---- engine side (main thread) ----
    def take(self, wait: bool) -> Control:
        msg = Control(shutdown=self.stop_requested)
        try:
            item = self._inbox.get(timeout=IDLE_WAIT_S) if wait else self._inbox.get_nowait()
            while True:
                kind, value = item
                (msg.new if kind == "new" else msg.cancel).append(value)
                item = self._inbox.get_nowait()
        except queue.Empty:
            pass
        msg.shutdown = self.stop_requested
        return msg

    def deliver(self, events: list[Event]) -> None:
        """Route a step's events: one wake-up per event loop per step, not one per event (a syscall each)."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue, Any]]] = {}
        if events:
            self.last_output = time.monotonic()
        with self._lock:
            for ev in events:
                stream = self._streams.get(ev.rid)
                if stream is None:
                    continue
                if ev.finish:
                    del self._streams[ev.rid]
                    self._finished(ev.rid, ev.finish)
                by_loop.setdefault(stream.loop, []).append((stream.queue, ev))
        for loop, items in by_loop.items():
            _post_all(loop, items)

    def fail(self, message: str) -> None:
        self.error = message
        with self._lock:
            streams, self._streams = list(self._streams.values()), {}
        for s in streams:
            _post(s, Failure(message))


def _put_all(items: list[tuple[asyncio.Queue, Any]]) -> None:
    for q, item in items:
        q.put_nowait(item)


def _post_all(loop: asyncio.AbstractEventLoop, items: list[tuple[asyncio.Queue, Any]]) -> None:
    try:
        loop.call_soon_threadsafe(_put_all, items)
    except RuntimeError:  # that event loop is gone (its server thread ended)
        pass


def _post(stream: _Stream, item: Any) -> None:
    try:
        stream.loop.call_soon_threadsafe(stream.queue.put_nowait, item)
    except RuntimeError:  # that request's event loop is gone (its server thread ended)
        pass
