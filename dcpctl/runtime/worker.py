"""Worker entry point: `torchrun ... -m dcpctl.runtime.worker`.

Reads torchrun's RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT and the launch config at
$DCPCTL_LAUNCH_CONFIG.  Serving: with $DCPCTL_SERVE (a JSON file of server options) every rank runs
dcpctl.runtime.server.serve.serve until shutdown.  Batch: the requests JSON at $DCPCTL_REQUESTS (a list of {prompt_ids,
max_new_tokens, temperature, top_k, top_p, seed, logprobs}); rank 0 writes
{"outputs": [...], "stats": {...}} to $DCPCTL_RESULT.  stats.kv_rows_per_rank: physical KV rows held
for the requests of this run, per global rank (counted when each request finishes, before its
pages are freed); stats.spec (with a `speculative` section, see docs/speculative.md): draft tokens
proposed and accepted, acceptance_rate, tokens_per_target_step, draft_kv_rows_per_rank (replicated).
Errors: one line on stderr prefixed with the rank, exit status 1.
"""
from __future__ import annotations

import json
import os
import sys
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
import yaml

from dcpctl.plan.hf_config import eos_token_ids
from dcpctl.runtime.engine.engine import DTYPES, Engine
from dcpctl.runtime.notes import stderr_line
from dcpctl.runtime.parallel import ParallelState


class LaunchConfigError(RuntimeError):
    pass


def build_state(cfg: dict) -> ParallelState:
    """ParallelState from the config's groups, checked against its topology (never re-derived)."""
    world = dist.get_world_size() if dist.is_initialized() else 1
    if cfg["world_size"] != world:
        raise LaunchConfigError(f"launch config world_size ({cfg['world_size']}) != WORLD_SIZE ({world})")
    topo = cfg["topology"]
    ps = ParallelState.build(cfg["groups"], topo["attn_dp_size"]) if dist.is_initialized() else ParallelState.single()
    for axis, key in (("tp", "tp_size"), ("attn_tp", "attn_tp_size"), ("dcp", "dcp_size")):
        got = getattr(ps, axis).size
        if got != topo[key]:
            raise LaunchConfigError(f"rank {ps.rank}: size of its {axis} group ({got}) != topology.{key} ({topo[key]})")
    if not set(ps.dcp.ranks) <= set(ps.attn_tp.ranks):
        raise LaunchConfigError(f"rank {ps.rank}: dcp group {ps.dcp.ranks} is not inside attn_tp group {ps.attn_tp.ranks}")
    return ps


def progress_lines(what: str) -> Callable[[int, int], None]:
    """A progress callback printing `dcpctl-progress WHAT done/total` lines (the launcher draws the bar)."""
    def report(done: int, total: int) -> None:
        stderr_line(f"dcpctl-progress {what} {done}/{total}")
    return report


def run_worker(cfg: dict, requests: list, model: Any = None, show_progress: bool = False) -> dict:
    """Everything after init_process_group: groups, model, generate.  Returns the result on every rank.

    show_progress: rank 0 reports loading and finished requests for the launcher's progress bars."""
    from dcpctl.runtime.models import load_model  # the model package is heavy; import late
    if "disaggregation" in cfg:  # a prefill and a decode instance in one world (docs/pd.md)
        from dcpctl.runtime.pd.driver import run_pd
        return run_pd(cfg, requests, eos_token_id=eos_token_ids(cfg["model"]["path"]))
    ps = build_state(cfg)
    report = show_progress and ps.rank == 0
    if model is None:
        model = load_model(cfg["model"]["path"], ps, cfg.get("decisions", {}), DTYPES[cfg["model"]["dtype"]],
                           torch.device(cfg.get("device", "cpu")), progress=progress_lines("loading") if report else None)
    engine = Engine(model, ps, cfg, eos_token_ids(cfg["model"]["path"]))
    return engine.generate(requests, progress=progress_lines("requests") if report else None)


def _env(name: str) -> str:
    if name not in os.environ:
        raise LaunchConfigError(f"environment variable {name} is not set")
    return os.environ[name]


def main() -> int:
    from dcpctl.runtime.lifeline import hold_on
    rank = os.environ.get("RANK", "?")
    hold_on()  # exit when the launcher or torchrun dies (docs/launch.md)
    try:
        cfg = yaml.safe_load(Path(_env("DCPCTL_LAUNCH_CONFIG")).read_text())
        serve_opts = json.loads(Path(os.environ["DCPCTL_SERVE"]).read_text()) if "DCPCTL_SERVE" in os.environ else None
        requests = json.loads(Path(_env("DCPCTL_REQUESTS")).read_text()) if serve_opts is None else []
        if cfg.get("device") == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        timeout = timedelta(seconds=float(os.environ.get("DCPCTL_DIST_TIMEOUT", 600)))
        dist.init_process_group(cfg.get("dist_backend", "gloo"), timeout=timeout)
        if serve_opts is not None:
            from dcpctl.runtime.server.serve import serve
            serve(cfg, serve_opts)
            return 0
        result = run_worker(cfg, requests, show_progress=True)
        if dist.get_rank() == 0:
            Path(_env("DCPCTL_RESULT")).write_text(json.dumps(result))
        return 0
    except Exception as e:  # one line per rank; DCPCTL_DEBUG=1 for the traceback
        if os.environ.get("DCPCTL_DEBUG") == "1":
            traceback.print_exc()
        msg = " ".join(str(e).split())
        stderr_line(f"[rank {rank}] {type(e).__name__}: {msg}")
        return 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
