"""`bench rank`'s served phase: the serving engine on the emulated rank, at the plan's concurrency and
context.

The engine (runtime/engine) is built from the plan's own launch config with its whole KV capacity, captures
its decode graphs as a server does before ready (one batch size: the plan's max_concurrency, over every
context bucket), and takes that many requests whose prompts are already cached (adopted with random rows, as a
PD decode instance adopts them: no prefill), each at the plan's context.  Its step loop then decodes
(pipelined, greedy), and three figures come out of it:

- peak memory: the most bytes allocated on the GPU (weights, the KV pool, graphs, activations);
- served step: the GPU time of each graph replay (the step trace's CUDA events);
- host gap: the GPU's idle time between one replay's end and the next one's start, the median over the steps:
  what a served decode step adds to the graph's own time (metadata, launch, sampling copies, bookkeeping).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import replace
from typing import Any

import torch

from dcpctl.bench.rank_cell import rank_ids
from dcpctl.runtime.kv.allocator import local_len

STEPS, WARM = 24, 4


def served_config(launch: Any, batch: int) -> Any:
    """The launch config a server of this plan runs, with decode graphs at `batch` only and no prefill
    graphs."""
    from dcpctl.contract.launch_config import CudaGraphSection
    graphs = CudaGraphSection((batch,), f"cuda graphs: decode batch size {batch} (bench rank's served phase)")
    return replace(launch.for_serving(max(batch, launch.kv.max_running_requests or 1)), cuda_graph=graphs)


def served_engine(model: Any, launch: Any, batch: int, ctx: int) -> Any:
    """The serving engine of `model` with its decode graphs captured and `batch` requests of `ctx` positions
    running (off CUDA its graphs replay eagerly)."""
    from dcpctl.runtime.engine.engine import Engine
    engine = Engine(model, model.ps, served_config(launch, batch))
    engine.warm_up()
    _adopt(engine, model, batch, ctx)
    return engine


def run_served(model: Any, launch: Any, batch: int, ctx: int) -> dict[str, Any]:
    """Peak memory, served step and host gap of `batch` requests at context `ctx` (CUDA only)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    from dcpctl.runtime.engine.phases import PhaseTimers
    engine = served_engine(model, launch, batch, ctx)
    clock = PhaseTimers(engine.runner, replays=True)     # CUDA events around each graph launch
    walls = []
    for _ in range(WARM + STEPS):
        t0 = time.perf_counter()
        engine.step()
        walls.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    clock.undo()
    events = (clock.replays or [])[WARM:]
    steps = [a.elapsed_time(b) * 1e3 for a, b in events]
    gaps = [b0.elapsed_time(a1) * 1e3 for (_, b0), (a1, _) in zip(events, events[1:])]
    out = {"batch": batch, "context": ctx, "peak_bytes": torch.cuda.max_memory_allocated(),
           "kv_pool_bytes": engine.pool.kv.numel() * engine.pool.kv.element_size(),
           "served_step_us": statistics.median(steps), "host_gap_us": statistics.median(gaps),
           "host_step_us": statistics.median(walls[WARM:]) * 1e6, "steps": len(steps)}
    engine.cancel_all()
    del engine
    return out


def _adopt(engine: Any, model: Any, batch: int, ctx: int) -> None:
    # batch requests of ctx positions in all: prompts of ctx - (WARM + STEPS + 1) ids, their rows already
    # cached
    from dcpctl.runtime.engine.request import SamplingParams, Sequence
    new = WARM + STEPS + 4     # a few tokens past the steps run: no request ends among them
    prompt_len = max(1, ctx - new)
    ps, pool = model.ps, engine.pool.kv
    n = local_len(prompt_len, 0, ps.dcp.size)
    # one random row per layer for every position (the step's time does not depend on the values; a whole
    # random prompt would add its size to the peak being measured)
    rows = torch.randn(pool.shape[0], 1, pool.shape[2], dtype=pool.dtype,
                       device=pool.device).expand(-1, n, -1)
    ids = rank_ids(batch, model, pool.device).tolist()
    params = SamplingParams(max_new_tokens=new, ignore_eos=True)
    for rid in range(batch):
        seq = Sequence(rid, [ids[rid]] * prompt_len, params, output=[ids[rid]], logprobs=[0.0],
                       computed=prompt_len)
        owned = local_len(prompt_len, ps.dcp.rank, ps.dcp.size)
        if not engine.adopt(seq, rows[:, :owned]):
            raise RuntimeError(f"the engine's KV pool holds fewer than {batch} requests of {ctx} positions")
    del rows
