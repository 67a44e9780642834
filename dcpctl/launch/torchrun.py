"""Launch config -> torchrun argv and environment (environment in, argv out; no hard-coded ports)."""
from __future__ import annotations

import socket
import sys
from typing import Any

SAFE_ENV = {"OMP_NUM_THREADS": "1", "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torchrun_argv(cfg: dict[str, Any], nnodes: int = 1, node_rank: int = 0, master_addr: str = "127.0.0.1",
                  master_port: int | None = None, module: str = "dcpctl.runtime.worker") -> list[str]:
    """One node's torchrun command (`python -m torch.distributed.run`, static rendezvous)."""
    world = int(cfg["world_size"])
    if world % nnodes:
        raise ValueError(f"world_size ({world}) is not a multiple of nnodes ({nnodes})")
    return [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}", f"--node-rank={node_rank}",
            f"--nproc-per-node={world // nnodes}", f"--master-addr={master_addr}",
            f"--master-port={master_port or free_port()}", "--max-restarts=0", "-m", module]


def runtime_env(config_path: str, **files: str) -> dict[str, str]:
    """Variables every rank reads: the launch config and, for generate, the request/result files."""
    env = dict(SAFE_ENV)
    env["DCPCTL_LAUNCH_CONFIG"] = config_path
    for key, value in files.items():
        env[f"DCPCTL_{key.upper()}"] = value
    return env
