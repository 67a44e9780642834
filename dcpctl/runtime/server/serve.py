"""Serving entry for every rank (the worker calls `serve` when $DCPCTL_SERVE names its options).

Rank 0 starts HTTP and prints `dcpctl-ready URL` on stderr once it accepts connections, and
`dcpctl-stopped` after a clean shutdown (every request cancelled, every KV page free).  SIGTERM or
SIGINT on rank 0 turns into a shutdown broadcast; on other ranks the signal is only noted, since
rank 0 (which torchrun signals too) ends the loop for everyone within one idle wait.
"""
from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import torch

from dcpctl.runtime.engine.engine import DTYPES, Engine
from dcpctl.runtime.notes import stderr_line
from dcpctl.runtime.server.control import control_group
from dcpctl.runtime.server.loop import run_loop

FAIL_GRACE_S = 1.0  # after an engine failure rank 0 answers 503 this long before exiting
DEFAULTS = {"host": "127.0.0.1", "port": 30000, "api_key": None, "max_running_requests": 64,
            "max_queued_requests": 256, "max_request_bytes": 1 << 20, "served_model_name": None,
            "allowed_hosts": []}


def model_limits(path: str | Path) -> tuple[int, int]:
    """(vocab_size, max_position_embeddings) from config.json (text_config for wrappers)."""
    cfg = json.loads((Path(path) / "config.json").read_text())
    cfg = cfg.get("text_config", cfg)
    return int(cfg["vocab_size"]), int(cfg.get("max_position_embeddings", 4096))


def allowed_hosts(host: str, extra: list[str]) -> tuple[str, ...] | None:
    """Host names the API answers (guard.py): a loopback bind, or any --allowed-host, limits them; else any."""
    from dcpctl.runtime.server.http import is_loopback
    return tuple(extra) if extra or is_loopback(host) else None


def failure_reason(e: BaseException) -> str:
    """What clients and /health see when the engine loop fails; the full error goes to the server log."""
    what = type(e).__name__
    if isinstance(e, RuntimeError) and any(w in str(e) for w in ("gloo", "NCCL", "Connection", "peer", "closed")):
        return f"another rank stopped responding ({what}); the server log has the detail"
    return f"the engine stopped ({what}); the server log has the detail"


def serve(cfg: dict, opts: dict[str, Any], model: Any = None) -> int:
    """Every rank: load, then run the lockstep loop until shutdown; returns the steps run."""
    from dcpctl.runtime.models import load_model
    from dcpctl.runtime.worker import build_state, eos_token_id, progress_lines
    opts = DEFAULTS | {k: v for k, v in opts.items() if v is not None}
    ps = build_state(cfg)
    group = control_group(cfg.get("dist_backend", "gloo"))
    path = cfg["model"]["path"]
    if model is None:
        model = load_model(path, ps, cfg.get("decisions", {}), DTYPES[cfg["model"]["dtype"]],
                           torch.device(cfg.get("device", "cpu")), progress=progress_lines("loading") if ps.rank == 0 else None)
    engine = Engine(model, ps, cfg, eos_token_id(path), max_running=int(opts["max_running_requests"]))
    engine.warm_up(progress_lines("cuda_graphs") if ps.rank == 0 else None, prompts=True)  # before the ready line
    if ps.rank != 0:
        _on_signals(lambda: None)
        return run_loop(engine, group, None)
    return _serve_rank0(engine, group, cfg, opts)


def _on_signals(fn: Any) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: fn())


def _serve_rank0(engine: Engine, group: Any, cfg: dict, opts: dict[str, Any]) -> int:
    from dcpctl.runtime.server.frontend import Frontend, FrontendSpec
    path = cfg["model"]["path"]
    vocab, context = model_limits(path)
    kda = getattr(engine.model, "kda_pool", None)
    spec = FrontendSpec(opts["host"], int(opts["port"]), opts["api_key"], int(opts["max_request_bytes"]),
                        allowed_hosts(opts["host"], opts["allowed_hosts"]), opts["served_model_name"] or Path(path).name,
                        str(path), vocab, context, engine.alloc.virtual_capacity, engine.ps.attn_tp.size,
                        int(opts["max_running_requests"]) + int(opts["max_queued_requests"]), kda is not None,
                        int(time.time()))
    front = Frontend(spec)      # HTTP in its own process (frontend.py says why)
    _on_signals(lambda: setattr(front, "stop_requested", True))

    def on_step(events: list, stats: list, step_s: float) -> None:
        front.on_step(events, stats, step_s, engine.exchange_seconds, (kda.used, kda.free) if kda else None)
    stderr_line(f"dcpctl-ready {front.url}")
    try:
        steps = run_loop(engine, group, front, on_step)
        front.fail("the server is shutting down")  # requests still open get an error, not a hang
    except BaseException as e:
        front.fail(failure_reason(e))  # the rank's own error line (worker.py) carries the detail
        time.sleep(FAIL_GRACE_S)
        raise
    finally:
        front.stop()
    stderr_line("dcpctl-stopped")
    return steps
