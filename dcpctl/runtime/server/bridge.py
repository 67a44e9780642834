"""Hand-over between rank 0's HTTP thread (asyncio) and the engine loop (main thread).

HTTP side: `open()` registers a request and returns its asyncio.Queue of events; `cancel()` asks
the engine to drop it.  Engine side: `take()` collects the next Control message (waiting a short
while when idle, so an idle server does not spin), `deliver()` routes events to their queues with
loop.call_soon_threadsafe, `fail()` ends every open request with an error.
"""
from __future__ import annotations

import asyncio
import itertools
import queue
import threading
from dataclasses import dataclass
from typing import Any

from dcpctl.runtime.engine.events import Event
from dcpctl.runtime.engine.request import SamplingParams
from dcpctl.runtime.server.control import Control, NewRequest

IDLE_WAIT_S = 0.2   # the idle heartbeat: how long rank 0 waits for work before broadcasting "nothing"


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
    """`worker` of `workers` HTTP processes (frontend.py): its request ids are worker, worker + workers, ..."""

    def __init__(self, max_outstanding: int, worker: int = 0, workers: int = 1) -> None:
        self.max_outstanding = max_outstanding
        self._inbox: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._streams: dict[int, _Stream] = {}
        self._lock = threading.Lock()
        self._rids = itertools.count(worker, workers)
        self._ended: list[str] = []   # finish reasons of requests this side ended (stop string, client gone)
        self.stop_requested = False
        self.error: str | None = None
        self.starting = False      # an HTTP worker up before its siblings: /health says 503 until the engine serves

    # ---- HTTP side (any event-loop thread) ----
    def open(self, prompt: list[int], params: SamplingParams) -> tuple[int, asyncio.Queue]:
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
            self._streams[rid] = stream
        self._inbox.put(("new", NewRequest(rid, prompt, params)))
        return rid, stream.queue

    def cancel(self, rid: int, reason: str | None = None) -> None:
        """Drop `rid`; `reason` ("stop" | "abort"): this side ended it, so the engine never reports its finish."""
        with self._lock:
            known = self._streams.pop(rid, None) is not None
            if reason is not None:
                self._ended.append(reason)
        if known:
            self._inbox.put(("cancel", rid))

    def take_ended(self) -> list[str]:
        """The finish reasons cancel() noted since the last call (the other HTTP workers count them too)."""
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
        with self._lock:
            for ev in events:
                stream = self._streams.get(ev.rid)
                if stream is None:
                    continue
                if ev.finish:
                    del self._streams[ev.rid]
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
