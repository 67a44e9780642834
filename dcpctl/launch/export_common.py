"""What every exporter shares: its options, and the environment its command lines set (what the hardware
needs)."""
from __future__ import annotations

import shlex
from dataclasses import dataclass

from dcpctl.plan.planner import Plan


@dataclass(frozen=True)
class ExportOptions:
    model_path: str  # what the serving nodes load (a path on the cluster or a hub id)
    dist_init_addr: str = "NODE0_ADDR:5000"
    port: int = 30000
    launch_config: str = "launch.yaml"  # torchrun export: the rendered config, next to node-N.sh
    image: str = "lmsysorg/sglang:latest"


MNNVL_ENV = {"NCCL_MNNVL_ENABLE": "1", "NCCL_CUMEM_ENABLE": "1"}


def hardware_env(plan: Plan) -> dict[str, str]:
    """Environment the hardware needs: MNNVL fabrics need NCCL's multi-node NVLink path."""
    return dict(MNNVL_ENV) if plan.request.hardware.mnnvl and plan.request.topology.nnodes > 1 else {}


def env_prefix(env: dict[str, str]) -> str:
    """`K=V K2=V2 ` before a command (values shell-quoted)."""
    return "".join(f"{k}={shlex.quote(v)} " for k, v in env.items())
