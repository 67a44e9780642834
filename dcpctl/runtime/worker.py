"""Worker entry point: `torchrun ... -m dcpctl.runtime.worker`.

Reads torchrun's RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT and the launch config at
$DCPCTL_LAUNCH_CONFIG.  Serving: with $DCPCTL_SERVE (a JSON file of server options) every rank runs
dcpctl.runtime.server.serve.serve until shutdown.  Batch: the requests JSON at $DCPCTL_REQUESTS (a list of
{prompt_ids, max_new_tokens, temperature, top_k, top_p, seed, logprobs}); rank 0 writes
{"outputs": [...], "stats": {...}} to $DCPCTL_RESULT.  stats.kv_rows_per_rank: physical KV rows held
for the requests of this run, per global rank (counted when each request finishes, before its
pages are freed); stats.spec (with a `speculative` section, see docs/speculative.md): draft tokens
proposed and accepted, acceptance_rate, tokens_per_target_step, draft_kv_rows_per_rank (replicated).
Errors: one line on stderr prefixed with the rank, exit status 1.
"""
from __future__ import annotations

import json
import sys
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from dcpctl import knobs
from dcpctl.contract.fields import LaunchConfigError
from dcpctl.contract.launch_config import LaunchConfig, PDLaunchConfig, read_launch_config
from dcpctl.contract.serve import read_serve_options
from dcpctl.runtime import settings
from dcpctl.runtime.boot import build_state, load_target, progress_lines
from dcpctl.runtime.engine.engine import Engine
from dcpctl.runtime.notes import stderr_line
from dcpctl.runtime.server.serve import serve


def run_worker(cfg: LaunchConfig | PDLaunchConfig, requests: list, model: Any = None,
               show_progress: bool = False) -> dict:
    """Everything after init_process_group: groups, model, generate.  Returns the result on every rank.

    show_progress: rank 0 reports loading and finished requests for the launcher's progress bars."""
    if isinstance(cfg, PDLaunchConfig):  # a prefill and a decode instance in one world (docs/pd.md)
        from dcpctl.runtime.pd.driver import run_pd
        return run_pd(cfg, requests)
    ps = build_state(cfg)
    report = show_progress and ps.rank == 0
    if model is None:
        model = load_target(cfg, ps, progress_lines("loading") if report else None)
    engine = Engine(model, ps, cfg)
    engine.warm_up(progress_lines("cuda_graphs") if report else None)
    return engine.generate(requests, progress=progress_lines("requests") if report else None)


def _env(name: str) -> str:
    if not knobs.is_set(name):
        raise LaunchConfigError(f"environment variable {name} is not set")
    return knobs.raw(name)


def main() -> int:
    from dcpctl.runtime.lifeline import hold_on
    rank = knobs.raw("RANK") or "?"
    hold_on()  # exit when the launcher or torchrun dies (docs/launch.md)
    try:
        cfg = read_launch_config(_env("DCPCTL_LAUNCH_CONFIG"))  # parsed once; typed sections from here on
        serve_opts = read_serve_options(knobs.raw("DCPCTL_SERVE")) if knobs.is_set("DCPCTL_SERVE") else None
        requests = json.loads(Path(_env("DCPCTL_REQUESTS")).read_text()) if serve_opts is None else []
        if cfg.device == "cuda":
            torch.cuda.set_device(int(knobs.get("LOCAL_RANK")))  # type: ignore[arg-type]
        settings.use(cfg.runtime)     # the plan's numerics and speed settings, for every kernel module
        timeout = timedelta(seconds=cfg.runtime.dist_timeout_s)
        dist.init_process_group(cfg.dist_backend, timeout=timeout)
        if serve_opts is not None:
            if not isinstance(cfg, LaunchConfig):
                raise LaunchConfigError("a PD launch config runs in batch mode only (docs/pd.md)")
            serve(cfg, serve_opts)
            return 0
        result = run_worker(cfg, requests, show_progress=True)
        if dist.get_rank() == 0:
            Path(_env("DCPCTL_RESULT")).write_text(json.dumps(result))
        return 0
    except Exception as e:  # one line per rank; DCPCTL_DEBUG=1 for the traceback
        if knobs.get("DCPCTL_DEBUG"):
            traceback.print_exc()
        msg = " ".join(str(e).split())
        stderr_line(f"[rank {rank}] {type(e).__name__}: {msg}")
        return 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
