"""`dcpctl bench rank`'s setup: the plan's launch config, which rank, which layers, and that rank's model.

    run = resolve(plan, launch_cfg, rank, layers, device)       # refusals raise UserError (one sentence)
    model = load(run, tmp, weights, dtype)                     # rank R's slices, its groups stand-in groups

The launch config comes from the launch command's own renderer (launch/config.py), so the bench refuses what
`dcpctl launch` refuses.  The busiest rank, which sets a deployment's step time (docs/design.md section 9), is
global rank 0: DCP rank 0 holds the stripe remainder (local_len(L) = L // c + (r < L % c)), attention-TP rank
0 a whole ceil(V / attn_tp) vocabulary slice (the last rank's may be shorter), and under EP
`--routing busiest` gives this rank's experts the busiest EP rank's rows whichever rank runs.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dcpctl import console
from dcpctl.plan.errors import UserError
from dcpctl.plan.model import ModelSpec, spec_from_config
from dcpctl.plan.weights import weight_bytes, weight_format

SERVED_MAX_BATCH = 256    # the served phase's batch at most (a graph at a larger one costs more than it
                          # tells)
BUSIEST = ("rank 0: DCP rank 0 holds the stripe remainder and attention-TP rank 0 a whole vocabulary slice; "
           "under EP --routing busiest gives it the busiest EP rank's rows")


@dataclass(frozen=True)
class RankRun:
    """What one `bench rank` run emulates."""

    plan: Any                  # plan.planner.Plan
    launch: Any                # contract.launch_config.LaunchConfig, as `dcpctl launch` would serve it
    rank: int
    rank_reason: str
    num_layers: int            # the model's
    layers_run: int
    dense_run: int
    config: dict[str, Any]     # the config.json the rank loads (layers_run layers)
    device: str
    served: tuple[int, int]    # the served phase's requests and context (served_point)

    @property
    def moe_run(self) -> int:
        return self.layers_run - self.dense_run

    @property
    def scaled(self) -> bool:
        return self.layers_run < self.num_layers

    def spec_run(self) -> ModelSpec:
        return spec_from_config(self.config, name="layers run")

    def plan_bytes(self, spec: ModelSpec) -> int:
        """The plan's weight bytes per rank (plan/weights.py) for `spec` under this plan's topology and
        hardware."""
        req = self.plan.request
        rep = bool(self.plan.decisions["dcp_replicate_q_proj"].value)
        return weight_bytes(spec, req.topology, rep, weight_format(req.model, req.hardware)[0])


def served_point(plan: Any, batches: list[int], contexts: list[int]) -> tuple[int, int]:
    """The served phase's (requests, context): the plan's max_concurrency (at most SERVED_MAX_BATCH) at its
    context, or, where not even one request fits, the smallest cell."""
    n = plan.memory.get("max_concurrency") or 0
    if n > 0:
        return min(n, SERVED_MAX_BATCH), plan.memory["context_len"]
    return min(batches), min(contexts)


def served_tokens(plan: Any, point: tuple[int, int], page: int) -> int:
    """Virtual KV tokens of the served engine: `point`'s requests, each in whole widened pages (prompt and new
    tokens), as a server sized for exactly them (--max-total-tokens) holds them."""
    batch, ctx = point
    widened = page * plan.request.topology.dcp_size
    return batch * -(-(ctx + 1) // widened) * widened


def resolve(plan: Any, launch: Any, rank: int | None, layers: int | None, device: str,
            served: tuple[int, int] = (1, 1)) -> RankRun:
    """The run of `rank` (None: the busiest) over the first `layers` layers (None: all), checked."""
    m = plan.request.model
    if m.kda is not None:
        raise UserError(f"{m.name} is a hybrid model: `bench rank` runs the captured decode step of "
                        "DeepSeek-V2/V3 and Kimi K2 models, and the bundled runtime runs KDA layers eagerly")
    if plan.request.speculative_algorithm:
        raise UserError("`bench rank` measures the plain decode step; drop --speculative-algorithm")
    world = launch.world_size
    if rank is not None and not 0 <= rank < world:
        raise UserError(f"--rank {rank} is not a rank of this plan: world ({world}) = tp ({world}); give "
                        f"0..{world - 1}")
    n = m.num_layers
    if layers is not None and not 1 <= layers <= n:
        raise UserError(f"--layers {layers} must be between 1 and the model's {n} layers")
    run_layers = layers or n
    dense = dense_layers(m, run_layers)
    config = {**m.extra["config"], "num_hidden_layers": run_layers, "first_k_dense_replace": dense}
    return RankRun(plan, launch, 0 if rank is None else rank, BUSIEST if rank is None else "--rank", n,
                   run_layers, dense, config, device, served)


def dense_layers(m: ModelSpec, layers: int) -> int:
    """Dense layers among `layers` run: the model's share of its dense layers, rounded (all of them at full
    depth)."""
    dense = min(m.first_k_dense_replace, m.num_layers) if m.n_routed_experts else m.num_layers
    return dense if layers == m.num_layers else round(layers * dense / m.num_layers)


def write_config(run: RankRun, directory: Path) -> Path:
    """A checkpoint directory holding only the run's config.json (synthetic weights need nothing else)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(run.config, indent=1))
    return directory


def check_gpu(hw: Any, device: str, layers: int | None, gpu_name: str | None) -> None:
    """UserError unless this machine runs the plan's hardware (an H100 stands in for an H200 with
    --layers)."""
    if device == "cpu":
        if hw.device != "cpu":
            raise UserError(f"the plan is for {hw.name} ({hw.gpu_name}) but this run is on the CPU: pass "
                            "--hardware cpu to plan for it, or run on that GPU")
        return
    if hw.device != "cuda":
        raise UserError(f"the plan is for the CPU but this run is on {gpu_name}: pass --device cpu, or leave "
                        "--hardware out to plan for this GPU")
    here, there = _family(gpu_name or ""), _family(hw.gpu_name)
    if here == there:
        return
    if (here, there) == ("H100", "H200") and layers:
        console.info(f"{gpu_name} stands in for the plan's {hw.gpu_name} over --layers {layers}: the same "
                     "sm_90 kernels, with less memory and memory bandwidth (3.35 against 4.8 TB/s), so times "
                     "are an H100's")
        return
    hint = " with --layers N (a layer subset that fits)" if (here, there) == ("H100", "H200") else ""
    raise UserError(f"the plan is for {hw.name} ({hw.gpu_name}) but this GPU is {gpu_name}: run it on that "
                    f"GPU, or leave --hardware out to plan for this one{hint}")


def _family(name: str) -> str:
    # 'NVIDIA H100 80GB HBM3' -> 'H100'; 'NVIDIA GB200' -> 'GB200'
    words = re.sub(r"(?i)nvidia", "", name).split()
    return words[0].upper() if words else ""


def load(run: RankRun, directory: Path, dtype: Any, weights_from: Path | None = None, seed: int = 0) -> Any:
    """Rank `run.rank`'s model, every group of its plan a stand-in group; synthetic weights unless
    `weights_from` (a checkpoint directory, read as `dcpctl launch` would read it)."""
    from dcpctl.runtime.models import load_model
    from dcpctl.runtime.standin import standin_state
    cfg = run.launch
    ps = standin_state(cfg.groups.lists(), run.rank, cfg.topology.attn_dp_size)
    path = weights_from or write_config(run, directory)
    return load_model(path, ps, cfg.decisions.dcp_replicate_q_proj, dtype, run.device,
                      synthetic=None if weights_from else seed)
