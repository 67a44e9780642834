"""The FastAPI app on rank 0: OpenAI-style errors and every route (guard.py: Host check, auth, body limit).

Errors carry OpenAI's body ({"error": {"message", "type", "param", "code"}}) and types: invalid_request_error
for every 4xx (an unknown route is "Invalid URL (METHOD /path)", a wrong method "Invalid method for URL
(...)"), server_error for every 5xx.

    GET  /health                 200 once a one-token generation came back within the timeout, else 503 with
                                 the reason (health.py; no key needed)
    GET  /v1/models              the served model; max_model_len: the longest request served (limits.py)
    GET  /metrics                Prometheus text
    POST /v1/completions, /v1/chat/completions, /generate   see openai_api.py
"""
from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException

from dcpctl.runtime.server.gen import ServerState
from dcpctl.runtime.server.guard import BodyLimit, Guard
from dcpctl.runtime.server.health import probe, static_reason
from dcpctl.runtime.server.openai_api import routes
from dcpctl.runtime.server.protocol import ApiError, error_response

_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict"}


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    err = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
    # drop "body" and pydantic's union/validator tags ("list[int]", "function-after[...]") from the location
    loc = [str(x) for x in err.get("loc", ()) if x != "body" and not (isinstance(x, str) and
                                                                      ("[" in x or x in _TYPE_TAGS))]
    where = ".".join(loc)
    msg = str(err.get("msg")).removeprefix("Value error, ")
    if err.get("type") == "json_invalid":
        return f"malformed JSON: {msg}", None
    return (f"{where}: {msg}" if where else msg), (loc[0] if loc else None)


def build_app(state: ServerState) -> FastAPI:
    app = FastAPI(title="dcpctl", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(ApiError)
    async def api_error(_: Request, e: ApiError) -> JSONResponse:
        return error_response(e.status, e.message, e.param, e.kind)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        return error_response(400, *_validation_message(e))

    @app.exception_handler(HTTPException)
    async def http_error(req: Request, e: HTTPException) -> JSONResponse:
        # OpenAI's words for a route or method it does not have; Allow (405) passes through
        what = {404: "Invalid URL", 405: "Invalid method for URL"}.get(e.status_code)
        msg = f"{what} ({req.method} {req.url.path})" if what else str(e.detail)
        return error_response(e.status_code, msg, headers=e.headers)

    @app.exception_handler(Exception)
    async def internal(_: Request, e: Exception) -> JSONResponse:
        # a bug of ours: a short reason to the client; starlette re-raises it, so uvicorn logs the traceback
        return error_response(500, f"internal error ({type(e).__name__}); the server log has the detail")

    @app.get("/health")
    async def health() -> Response:
        why = static_reason(state.bridge) or await probe(state.bridge, state.health_timeout_s)
        return error_response(503, why, kind="server_error") if why else PlainTextResponse("ok")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list",
                "data": [{"id": state.model_name, "object": "model", "created": state.created,
                          "owned_by": "dcpctl", "max_model_len": state.limits.max_model_len}]}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    app.include_router(routes(state))
    app.add_middleware(BodyLimit, limit=state.max_request_bytes)
    # outermost: runs first
    app.add_middleware(Guard, api_key=state.api_key, allowed_hosts=state.allowed_hosts)
    return app
