"""The server's options ($DCPCTL_SERVE, serve.json): kept out of launch.yaml, since they may hold the API key.

How many requests run at once is the launch config's kv.max_running_requests (the engine's cap).
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


def serve_options(data: dict[str, Any]) -> ServeOptions:
    """ServeOptions from serve.json's object (None values mean the default)."""
    if not isinstance(data, dict):
        raise LaunchConfigError(f"serve options must be a JSON object, got {type(data).__name__}")
    return parse_section(ServeOptions, {k: v for k, v in data.items() if v is not None}, "serve")


def read_serve_options(path: str | Path) -> ServeOptions:
    return serve_options(json.loads(Path(path).read_text()))
