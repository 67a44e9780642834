"""What every rank does with the parsed launch config before its engine runs: groups, then the model."""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist

from dcpctl.contract.fields import LaunchConfigError
from dcpctl.contract.launch_config import LaunchConfig
from dcpctl.runtime.notes import stderr_line
from dcpctl.runtime.parallel import ParallelState

DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16,
          "float16": torch.float16}


def build_state(cfg: LaunchConfig) -> ParallelState:
    """ParallelState from the config's groups, checked against its topology (never re-derived)."""
    world = dist.get_world_size() if dist.is_initialized() else 1
    if cfg.world_size != world:
        raise LaunchConfigError(f"launch config world_size ({cfg.world_size}) != WORLD_SIZE ({world})")
    topo = cfg.topology
    ps = (ParallelState.build(cfg.groups.lists(), topo.attn_dp_size)
          if dist.is_initialized() else ParallelState.single())
    for axis, key in (("tp", "tp_size"), ("attn_tp", "attn_tp_size"), ("dcp", "dcp_size")):
        got, want = getattr(ps, axis).size, getattr(topo, key)
        if got != want:
            raise LaunchConfigError(f"rank {ps.rank}: size of its {axis} group ({got}) != topology.{key} "
                                    f"({want})")
    if not set(ps.dcp.ranks) <= set(ps.attn_tp.ranks):
        raise LaunchConfigError(f"rank {ps.rank}: dcp group {ps.dcp.ranks} is not inside attn_tp group "
                                f"{ps.attn_tp.ranks}")
    return ps


def progress_lines(what: str) -> Callable[[int, int], None]:
    """A progress callback printing `dcpctl-progress WHAT done/total` lines (the launcher draws the bar)."""
    def report(done: int, total: int) -> None:
        stderr_line(f"dcpctl-progress {what} {done}/{total}")
    return report


def load_target(cfg: LaunchConfig, ps: ParallelState,
                progress: Callable[[int, int], None] | None = None) -> Any:
    """This rank's shards of the served checkpoint, as the launch config says (dtype, device, replicated
    q)."""
    from dcpctl.runtime.models import load_model  # the model package is heavy; import late
    return load_model(cfg.model.path, ps, cfg.decisions.dcp_replicate_q_proj, DTYPES[cfg.model.dtype],
                      torch.device(cfg.device), progress=progress)
