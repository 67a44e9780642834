"""`dcpctl launch`'s HTTP server flags (rank 0's API) and the serve options they become (contract/serve.py).

    @serve_flags                       the options, on the launch command
    serve_options(flags, ...) -> dict  serve.json's object: never the API key (the ranks read $DCPCTL_API_KEY)
    check_access(host, api_key, ...)   a key off loopback, never an empty one
"""
from __future__ import annotations

from typing import Any, Callable

import click

from dcpctl import console
from dcpctl.contract.serve import ServeOptions
from dcpctl.plan.errors import UserError

D = ServeOptions()
SERVE_FLAGS = ("host", "port", "api_key", "allow_unauthenticated", "allowed_hosts", "max_queued_requests",
               "max_request_bytes", "served_model_name", "tokenizer_worker_num", "health_check_timeout",
               "h11_max_incomplete_event_size", "h11_max_header_count", "request_read_timeout",
               "sse_keepalive_interval", "constrained_json_disable_any_whitespace",
               "constrained_json_whitespace_pattern", "constrained_json_max_whitespace_cnt")


def serve_flags(f: Callable[..., Any]) -> Callable[..., Any]:
    for opt in reversed([
        click.option("--host", default=D.host, show_default=True, help="HTTP bind address (rank 0)."),
        click.option("--port", type=click.IntRange(0, 65535), default=D.port, show_default=True,
                     help="HTTP port; 0 picks a free one (the ready line prints it)."),
        click.option("--api-key", envvar="DCPCTL_API_KEY",
                     help="Require `Authorization: Bearer KEY`. A flag shows in `ps`: export DCPCTL_API_KEY instead "
                          "to keep the key out of every command line (the ranks get it in their environment, never "
                          "on disk)."),
        click.option("--allow-unauthenticated", is_flag=True, help="Allow a non-loopback --host without --api-key."),
        click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
                     help="Also answer requests whose Host header names NAME (repeatable). A loopback server answers "
                          "only loopback names by default (no DNS rebinding); a public one answers any unless given."),
        click.option("--max-queued-requests", type=click.IntRange(min=0), default=D.max_queued_requests,
                     show_default=True, help="Requests waiting beyond --max-running-requests before new ones get 503."),
        click.option("--max-request-bytes", type=click.IntRange(min=1024), default=D.max_request_bytes,
                     show_default=True, help="Largest accepted request body (413 above)."),
        click.option("--h11-max-incomplete-event-size", type=click.IntRange(min=1024),
                     default=D.h11_max_incomplete_event_size, show_default=True,
                     help="Largest request head (request line and headers), in bytes: 431 and closed above, counted "
                          "before anything parses it (vLLM's name and default)."),
        click.option("--h11-max-header-count", type=click.IntRange(min=1), default=D.h11_max_header_count,
                     show_default=True, help="Most headers in one request: 431 above (vLLM's name and default)."),
        click.option("--request-read-timeout", type=click.FloatRange(min=0.1), default=D.request_read_timeout,
                     show_default=True,
                     help="Seconds a connection has to send a whole request (head and body) once it opens or starts "
                          "one: 408 and closed after. Idle keep-alive connections close after 5 s."),
        click.option("--sse-keepalive-interval", type=click.FloatRange(min=0.01), default=D.sse_keepalive_interval,
                     show_default=True,
                     help="Seconds a stream may wait for a token (queued, retracted) before it sends an SSE comment, "
                          "so that a proxy's read timeout (60 s by default in nginx) does not cut it."),
        click.option("--constrained-json-disable-any-whitespace", is_flag=True,
                     help="Structured output: JSON without whitespace between its tokens (SGLang's flag; default: "
                          "any whitespace, as SGLang and vLLM allow)."),
        click.option("--constrained-json-whitespace-pattern", metavar="REGEX",
                     help="Structured output: the regex JSON's whitespace must match (SGLang's flag)."),
        click.option("--constrained-json-max-whitespace-cnt", type=click.IntRange(min=0),
                     help="Structured output: at most N whitespace characters in a row in JSON (SGLang's flag): a "
                          "weak model cannot fill max_tokens with whitespace."),
        click.option("--served-model-name", help="Model id in the API (default: the checkpoint directory's name)."),
        click.option("--tokenizer-worker-num", type=click.IntRange(1, 64), default=None,
                     help="HTTP worker processes sharing the port (SGLang's name). One streams at most ~14k tokens a "
                          "second; default: 1 on CPU, on CUDA one per 8 --max-running-requests (at most 4)."),
        click.option("--health-check-timeout", type=click.FloatRange(min=0.1), default=D.health_check_timeout,
                     show_default=True,
                     help="Seconds GET /health waits for its one-token generation before answering 503."),
    ]):
        f = opt(f)
    return f


def serve_options(flags: dict[str, Any], model_name: str, workers: int, context: int | None) -> dict[str, Any]:
    """serve.json's object from the flags, the values ServeOptions has by default left out; never the API key (the
    ranks read it from $DCPCTL_API_KEY)."""
    keep = set(SERVE_FLAGS) - {"api_key", "allow_unauthenticated"}
    out = {k: v for k, v in flags.items() if k in keep} | {
        "allowed_hosts": tuple(flags["allowed_hosts"]), "served_model_name": flags["served_model_name"] or model_name,
        "tokenizer_worker_num": workers, "context_length": context}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items() if v != getattr(D, k)}


BUILT_IN_JSON_WHITESPACE = 2


def json_whitespace(flags: dict[str, Any], model_path: str) -> None:
    """Structured output's JSON whitespace: any, as SGLang and vLLM allow, unless a --constrained-json-* flag says
    otherwise; for the built-in model at most BUILT_IN_JSON_WHITESPACE in a row, decided here and said once (it
    learned Python's indentation: unbounded, it fills max_tokens with spaces before the JSON ends)."""
    from pathlib import Path

    from dcpctl.launch.default_model import TRAINED_DIR
    given = (flags["constrained_json_disable_any_whitespace"] or flags["constrained_json_whitespace_pattern"]
             is not None or flags["constrained_json_max_whitespace_cnt"] is not None)
    if given or Path(model_path).resolve() != TRAINED_DIR.resolve():
        return
    flags["constrained_json_max_whitespace_cnt"] = BUILT_IN_JSON_WHITESPACE
    console.info(f"structured output: JSON whitespace at most {BUILT_IN_JSON_WHITESPACE} characters in a row (auto: the "
                 "built-in model fills max_tokens with whitespace otherwise; --constrained-json-max-whitespace-cnt "
                 "to set)")


def check_access(host: str, api_key: str | None, allow_unauthenticated: bool) -> None:
    """Who may talk to the API: a key is required off loopback, an empty key is never one."""
    from dcpctl.runtime.server.http import is_loopback
    if api_key is not None and not api_key.strip():
        raise UserError("--api-key (or $DCPCTL_API_KEY) is empty: a bare 'Authorization: Bearer' would pass; "
                        "give a real key or leave it out")
    if is_loopback(host) or api_key:
        return
    if not allow_unauthenticated:
        raise UserError(f"--host {host} is not a loopback address: pass --api-key KEY (or $DCPCTL_API_KEY), "
                        "or --allow-unauthenticated to serve without one")
    console.warn(f"serving on {host} without an API key (--allow-unauthenticated): anyone who can reach this "
                 "address can use the model")
