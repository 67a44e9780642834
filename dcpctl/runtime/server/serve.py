"""Serving entry for every rank (the worker calls `serve` when $DCPCTL_SERVE holds its options).

The API key comes from $DCPCTL_API_KEY (contract/serve.py says why it is never in the options).

Rank 0 starts HTTP and prints `dcpctl-ready URL` on stderr once it accepts connections, and
`dcpctl-stopped` after a clean shutdown (every request cancelled, every KV page free).  SIGTERM or
SIGINT on rank 0 turns into a shutdown broadcast; on other ranks the signal is only noted, since
rank 0 (which torchrun signals too) ends the loop for everyone within one idle wait.
"""
from __future__ import annotations

import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from dcpctl import knobs
from dcpctl.contract.fields import LaunchConfigError
from dcpctl.contract.launch_config import LaunchConfig
from dcpctl.contract.limits import served_context
from dcpctl.contract.serve import ServeOptions
from dcpctl.runtime import compile_watch
from dcpctl.runtime.boot import build_state, load_target, progress_lines
from dcpctl.runtime.engine.engine import Engine
from dcpctl.runtime.notes import stderr_line
from dcpctl.runtime.server.control import control_group
from dcpctl.runtime.server.loop import run_loop

FAIL_GRACE_S = 1.0  # after an engine failure rank 0 answers 503 this long before exiting


def allowed_hosts(host: str, extra: list[str]) -> tuple[str, ...] | None:
    """Host names the API answers (guard.py): a loopback bind, or any --allowed-host, limits them; else
    any."""
    from dcpctl.runtime.server.http import is_loopback
    return tuple(extra) if extra or is_loopback(host) else None


def failure_reason(e: BaseException) -> str:
    """What clients and /health see when the engine loop fails; the full error goes to the server log."""
    what = type(e).__name__
    if isinstance(e, RuntimeError) and any(w in str(e)
                                           for w in ("gloo", "NCCL", "Connection", "peer", "closed")):
        return f"another rank stopped responding ({what}); the server log has the detail"
    return f"the engine stopped ({what}); the server log has the detail"


def serve(cfg: LaunchConfig, opts: ServeOptions, model: Any = None) -> int:
    """Every rank: load, then run the lockstep loop until shutdown; returns the steps run."""
    if cfg.kv.max_running_requests is None or cfg.limits is None or cfg.limits.vocab_size is None:
        raise LaunchConfigError("serving needs kv.max_running_requests and a checkpoint with a config.json "
                                "(render the launch config with `dcpctl launch --dry-run`)")
    served_context(cfg.limits, opts.context_length)   # a bad --context-length fails before the weights load
    if knobs.is_set("DCPCTL_API_KEY"):     # the launcher hands the key over in the environment, never in a
                                           # file
        opts = replace(opts, api_key=knobs.raw("DCPCTL_API_KEY"))
    ps = build_state(cfg)
    group = control_group(cfg.dist_backend)
    if model is None:
        model = load_target(cfg, ps, progress_lines("loading") if ps.rank == 0 else None)
    engine = Engine(model, ps, cfg)
    # before the ready line
    engine.warm_up(progress_lines("cuda_graphs") if ps.rank == 0 else None, prompts=True,
                   prefill_progress=progress_lines("warm_up_prefills") if ps.rank == 0 else None)
    compile_watch.after_ready()      # a kernel built past this point is named (runtime/compile_watch.py)
    if ps.rank != 0:
        _on_signals(lambda: None)
        return run_loop(engine, group, None)
    return _serve_rank0(engine, group, cfg, opts)


def _on_signals(fn: Any) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: fn())


def _serve_rank0(engine: Engine, group: Any, cfg: LaunchConfig, opts: ServeOptions) -> int:
    from dcpctl.runtime.grammar import json_options
    from dcpctl.runtime.server.connection import ConnectionLimits
    from dcpctl.runtime.server.frontend import Frontend, FrontendSpec
    path, limits = cfg.model.path, cfg.limits
    # serve()
    assert cfg.kv.max_running_requests is not None and limits is not None and limits.vocab_size is not None
    kda = engine.state_pool
    spec = FrontendSpec(opts.host, opts.port, opts.api_key, opts.max_request_bytes,
                        allowed_hosts(opts.host, list(opts.allowed_hosts)),
                        opts.served_model_name or Path(path).name, str(path), limits.vocab_size,
                        served_context(limits, opts.context_length), engine.alloc.virtual_capacity,
                        engine.ps.attn_tp.size, cfg.kv.max_running_requests + opts.max_queued_requests,
                        kda is not None, int(time.time()), engine.spec.kv_extra if engine.spec else 0,
                        opts.tokenizer_worker_num, health_timeout_s=opts.health_check_timeout,
                        limits=ConnectionLimits(opts.h11_max_incomplete_event_size, opts.h11_max_header_count,
                                                opts.request_read_timeout),
                        keepalive_s=opts.sse_keepalive_interval,
                        json_options=tuple(json_options(opts.constrained_json_disable_any_whitespace,
                                                        opts.constrained_json_whitespace_pattern,
                                                        opts.constrained_json_max_whitespace_cnt).items()))
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
