"""uvicorn's httptools protocol with bounds on what a connection may send before the app sees a request.

    header section   at most `header_bytes` bytes (request line and headers) and `header_count` headers: 431
                     and the connection closed, counted as the bytes arrive, before the parser has built
                     anything
    read timeout     a request's head and body must arrive within `read_timeout_s` of the connection opening
                     (or of the first byte of a later request on it): else 408 and closed. Idle keep-alive
                     connections between requests close after uvicorn's timeout_keep_alive (5 s, as vLLM's)

uvicorn enforces a header limit (h11_max_incomplete_event_size) in its h11 protocol only; with httptools,
which the server uses for speed (http.py), a header of any size was read and parsed first: a keyless 64 MB
header cost seconds of the HTTP process's CPU, since the parser grows each header value by concatenation.  The
defaults are vLLM's (4 MiB, 256 headers: its h11 limits).  A response the app has started is never
interrupted: the timer stops once the request is fully read, so a long stream keeps its connection.
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol


@dataclass(frozen=True)
class ConnectionLimits:
    header_bytes: int = 4 << 20      # vLLM's h11_max_incomplete_event_size default
    header_count: int = 256          # vLLM's h11_max_header_count default
    read_timeout_s: float = 30.0


class _Refused(Exception):
    """Raised from a parser callback to stop parsing; send_400_response then answers with the status it
    carries."""


class GuardedHttpTools(HttpToolsProtocol):
    """One connection (uvicorn makes one per accepted socket); `limits` as in the module docstring."""

    def __init__(self, *args: Any, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self._head: int | None = 0           # bytes of the current request's head so far; None once it is
                                             # read
        self._headers = 0
        self._refusal: tuple[int, str] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._head is not None:
            self._head += len(data)
            if self._head > self.limits.header_bytes:
                return self._reply(431, f"the request's header section passed {self.limits.header_bytes} "
                                        "bytes (--h11-max-incomplete-event-size)")
        super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._headers = 0
        self._arm()

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers += 1
        if self._headers > self.limits.header_count:
            self._refusal = (431, f"the request has more than {self.limits.header_count} headers "
                                  "(--h11-max-header-count)")
            raise _Refused
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._head = None
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        self._head = 0                       # the next request on this connection starts its own count
        super().on_message_complete()

    def send_400_response(self, msg: str) -> None:
        # uvicorn's answer to any parser error, a callback's included: ours carries its own status
        status, text = self._refusal or (400, msg)
        self._reply(status, text)

    def _arm(self) -> None:
        if self._timer is None:
            self._timer = self.loop.call_later(self.limits.read_timeout_s, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        if self.cycle is not None and self.cycle.response_started:
            self.transport.close()           # never write into a response that has begun
            return
        self._reply(408, f"the request did not arrive within {self.limits.read_timeout_s:g} s "
                         "(--request-read-timeout)")

    def _reply(self, status: int, message: str) -> None:
        """An OpenAI-style error, then close (the request is abandoned: nothing of it reached the app)."""
        if self.transport.is_closing():
            return
        body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                     "code": status}}).encode()
        head = (b"content-type: application/json\r\ncontent-length: " + str(len(body)).encode() +
                b"\r\nconnection: close\r\n\r\n")
        self.transport.write(STATUS_LINE[status] + head + body)
        self.transport.close()
