"""ASGI middleware in front of every route, run before any body is parsed.

    Guard      Host check (a loopback server answers only loopback Host names: no DNS rebinding),
               then the API key (every path but /health): 403 / 401 without reading the body
    BodyLimit  reads the whole body (declared or chunked) up to the limit, 413 above it, then replays it
"""
from __future__ import annotations

import hmac

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dcpctl.runtime.server.http import is_loopback
from dcpctl.runtime.server.protocol import error_response

OPEN_PATHS = ("/health",)


def host_name(header: str) -> str:
    """The name part of a Host header: `[::1]:8000` -> `::1`, `localhost:8000` -> `localhost`."""
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    name, _, port = header.rpartition(":")
    return name if name and port.isdigit() else header


def host_allowed(header: str | None, allowed: tuple[str, ...] | None) -> bool:
    """None allows any Host; otherwise loopback names (localhost, *.localhost, 127/8, ::1) or one of
    `allowed`."""
    if allowed is None or header is None:
        return True
    name = host_name(header).lower().rstrip(".")
    return (name == "localhost" or name.endswith(".localhost") or is_loopback(name)
            or name in (a.lower() for a in allowed))


class Guard:
    def __init__(self, app: ASGIApp, api_key: str | None, allowed_hosts: tuple[str, ...] | None) -> None:
        if api_key is not None and not api_key.strip():
            raise ValueError("an empty API key would let a bare 'Authorization: Bearer' in")
        self.app, self.api_key, self.allowed_hosts = app, api_key, allowed_hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        host = headers.get("host")
        if not host_allowed(host, self.allowed_hosts):
            resp = error_response(403, f"Host {host!r} is not allowed: this server is bound to loopback and "
                                       "answers only loopback names (start it with --allowed-host NAME to "
                                       "add one)")
            return await resp(scope, receive, send)
        if self.api_key is not None and scope.get("path") not in OPEN_PATHS and not self._authorized(headers):
            resp = error_response(401, "missing or wrong API key (send Authorization: Bearer KEY)")
            return await resp(scope, receive, send)
        await self.app(scope, receive, send)

    def _authorized(self, headers: dict[str, str]) -> bool:
        assert self.api_key is not None
        scheme, _, token = headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(),
                                                                  self.api_key.encode())


class BodyLimit:
    """413 for a request body over `limit` bytes, declared or chunked; the app gets the body in one
    message."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await self._reject(scope, receive, send, int(declared))
        parts, size, more = [], 0, True
        while more:
            msg = await receive()
            if msg["type"] != "http.request":
                return  # the client left before its body ended: nobody to answer
            parts.append(msg.get("body", b""))
            size += len(parts[-1])
            if size > self.limit:
                return await self._reject(scope, receive, send, size, "more than ")
            more = msg.get("more_body", False)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()  # after the body: disconnect detection
            replayed = True
            return {"type": "http.request", "body": b"".join(parts), "more_body": False}

        await self.app(scope, replay, send)

    async def _reject(self, scope: Scope, receive: Receive, send: Send, size: int,
                      at_least: str = "") -> None:
        resp = error_response(413,
                              f"request body ({at_least}{size} bytes) exceeds the limit ({self.limit} bytes)")
        await resp(scope, receive, send)
