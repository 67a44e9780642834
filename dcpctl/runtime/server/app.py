"""The FastAPI app on rank 0: auth, body size limit, OpenAI-style errors, and every route.

    GET  /health                 200 while the engine runs, 503 once it failed (no auth)
    GET  /v1/models              the served model
    GET  /metrics                Prometheus text
    POST /v1/completions, /v1/chat/completions, /generate   see openai_api.py
"""
from __future__ import annotations

import hmac
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dcpctl.runtime.server.gen import ServerState
from dcpctl.runtime.server.openai_api import routes
from dcpctl.runtime.server.protocol import ApiError, error_response


class _TooLarge(Exception):
    pass


class BodyLimit:
    """413 for a request body over `limit` bytes (declared or streamed)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await self._reject(scope, receive, send, int(declared))
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            msg = await receive()
            seen += len(msg.get("body", b""))
            if seen > self.limit:
                raise _TooLarge()
            return msg

        try:
            await self.app(scope, counted, send)
        except _TooLarge:
            await self._reject(scope, receive, send, seen)

    async def _reject(self, scope: Scope, receive: Receive, send: Send, size: int) -> None:
        resp = error_response(413, f"request body ({size} bytes) exceeds the limit ({self.limit} bytes)")
        await resp(scope, receive, send)


def _auth(state: ServerState) -> Any:
    async def check(request: Request) -> None:
        if state.api_key is None:
            return
        got = request.headers.get("authorization", "")
        scheme, _, token = got.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), state.api_key.encode()):
            raise ApiError(401, "missing or wrong API key (send Authorization: Bearer KEY)")
    return check


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    err = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
    loc = [str(x) for x in err.get("loc", ()) if x != "body"]
    where = ".".join(loc)
    if err.get("type") == "json_invalid":
        return f"malformed JSON: {err.get('msg')}", None
    return (f"{where}: {err.get('msg')}" if where else str(err.get("msg"))), (loc[0] if loc else None)


def build_app(state: ServerState) -> FastAPI:
    app = FastAPI(title="dcpctl", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(ApiError)
    async def api_error(_: Request, e: ApiError) -> JSONResponse:
        return error_response(e.status, e.message, e.param, e.kind)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        return error_response(400, *_validation_message(e))

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, e: HTTPException) -> JSONResponse:
        return error_response(e.status_code, str(e.detail))

    @app.get("/health")
    async def health() -> Response:
        if state.bridge.error is not None:
            return error_response(503, f"engine failed: {state.bridge.error}")
        if state.bridge.stop_requested:
            return error_response(503, "shutting down")
        return PlainTextResponse("ok")

    auth = [Depends(_auth(state))]

    @app.get("/v1/models", dependencies=auth)
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": state.model_name, "object": "model", "created": state.created,
                                            "owned_by": "dcpctl", "max_model_len": state.context_len}]}

    @app.get("/metrics", dependencies=auth)
    async def metrics() -> Response:
        return Response(state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    app.include_router(routes(state), dependencies=auth)
    app.add_middleware(BodyLimit, limit=state.max_request_bytes)
    return app
