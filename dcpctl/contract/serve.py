"""The server's options ($DCPCTL_SERVE: a serve.json file, or that JSON itself): separate from launch.yaml, since
they are rank 0's alone.

The API key is never among them on disk: `dcpctl launch` hands it to the ranks in their environment
($DCPCTL_API_KEY, private to the user, unlike a command line that `ps` shows), and rank 0 reads it there
(runtime/worker.py).  How many requests run at once is the launch config's kv.max_running_requests.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dcpctl.contract.fields import LaunchConfigError, parse_section


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 30000
    api_key: str | None = None
    max_queued_requests: int = 256          # waiting beyond kv.max_running_requests before new ones get 503
    max_request_bytes: int = 1 << 20
    served_model_name: str | None = None    # None: the checkpoint directory's name
    allowed_hosts: tuple[str, ...] = ()
    tokenizer_worker_num: int = 1           # HTTP processes sharing the port (SGLang's --tokenizer-worker-num)
    context_length: int | None = None       # prompt + output cap (SGLang's --context-length); None: the model's
    health_check_timeout: float = 20.0      # seconds /health waits for its one-token generation (SGLang's 20)
    h11_max_incomplete_event_size: int = 4 << 20   # the request head's bytes (vLLM's name and default; 431 above)
    h11_max_header_count: int = 256         # headers per request (vLLM's name and default; 431 above)
    request_read_timeout: float = 30.0      # seconds for a request's head and body to arrive (408 and closed)
    sse_keepalive_interval: float = 15.0    # a stream waiting for tokens sends an SSE comment this often
    constrained_json_disable_any_whitespace: bool = False   # SGLang's: JSON output without whitespace
    constrained_json_whitespace_pattern: str | None = None  # SGLang's: the regex of JSON's whitespace
    constrained_json_max_whitespace_cnt: int | None = None  # SGLang's: at most this many whitespace characters in a row


def serve_options(data: dict[str, Any]) -> ServeOptions:
    """ServeOptions from serve.json's object (None values mean the default)."""
    if not isinstance(data, dict):
        raise LaunchConfigError(f"serve options must be a JSON object, got {type(data).__name__}")
    return parse_section(ServeOptions, {k: v for k, v in data.items() if v is not None}, "serve")


def read_serve_options(where: str | Path) -> ServeOptions:
    """From a serve.json path, or from the JSON object itself (what `dcpctl launch --dry-run` prints)."""
    text = str(where).strip()
    return serve_options(json.loads(text if text.startswith("{") else Path(where).read_text()))
