"""Prime a frontend's HTTP stack in process before it reports ready: the first client pays nothing lazy.

FastAPI builds a route's validators on the first request that reaches it, and anyio imports its asyncio
backend on the first streamed response: work the first client would otherwise wait for (what is left of the
first request's TTFT is measured in docs/benchmarks.md).  `prime(app, api_key)` sends the app,
without a socket, one request per route that is answered without the engine (a 400 from the fits check:
the body asks for more tokens than any KV budget), one request per GET route, and one streamed response.
No request reaches the engine, so no KV page, metric or request id moves.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.responses import StreamingResponse

TOO_MANY = 2**63 - 1     # max_tokens no capacity admits: the route answers 400 before it submits anything
POSTS = (("/v1/completions", {"prompt": "warm", "max_tokens": TOO_MANY, "stream": True}),
         ("/v1/chat/completions", {"messages": [{"role": "user", "content": "warm"}], "max_tokens": TOO_MANY,
                                   "stream": True}),
         ("/generate", {"text": "warm", "sampling_params": {"max_new_tokens": TOO_MANY}}))
GETS = ("/health", "/v1/models", "/metrics")


def prime(app: Any, api_key: str | None) -> dict[str, int]:
    """Every route once, in process; returns path -> status (a test checks none reached the engine)."""
    return asyncio.run(_prime(app, api_key))


async def _prime(app: Any, api_key: str | None) -> dict[str, int]:
    auth = [(b"authorization", f"Bearer {api_key}".encode())] if api_key else []
    got = {path: await _call(app, "GET", path, b"", auth) for path in GETS}
    for path, body in POSTS:
        got[path] = await _call(app, "POST", path, json.dumps(body).encode(), auth)

    async def two() -> Any:
        yield "data: 1\n\n"
        yield "data: [DONE]\n\n"
    got["stream"] = await _call(StreamingResponse(two(), media_type="text/event-stream"), "GET", "/", b"", [])
    return got


async def _call(app: Any, method: str, path: str, body: bytes, extra: list[tuple[bytes, bytes]]) -> int:
    headers = [(b"host", b"localhost"), (b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())] + extra
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": headers, "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 1)}
    delivered = False
    status: list[int] = []

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if delivered:              # after the body: a client that stays until the response ends
            await asyncio.Event().wait()
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(msg: dict[str, Any]) -> None:
        if msg["type"] == "http.response.start":
            status.append(msg["status"])
    await app(scope, receive, send)
    return status[0] if status else 0
