"""`dcpctl bench rank`'s measurements: one rank of a plan at the real model's size on this GPU.

The command and its options are dcpctl/cli/bench_rank.py (docs/bench-rank.md).  Every rank of a TP/DCP/EP
deployment runs the same operations on its own slice, so one GPU runs rank R alone: its weight slices
generated on the device (runtime/models/synthetic.py), its collectives answered by stand-in groups whose every
peer behaves as this rank (runtime/standin.py; their copies timed and subtracted), its MoE routing fixed
(bench/rank_routing.py).  Setup: bench/rank_setup.py; measurements: rank_run.py (cells: rank_cell.py, served
phase: rank_served.py); the measured file and tables: rank_report.py.
"""
from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from dcpctl import console


def run_bench(run: Any, batches: list[int], contexts: list[int], routing: str, reps: int, seed: int,
              checkpoint: Path | None, command: str, out: Path | None) -> dict[str, Any]:
    """The measured file of `run` (bench/rank_setup.RankRun) over batches x contexts (routing: uniform,
    busiest, both or model), also written to `out` as it grows (`partial: true` until the end)."""
    import torch

    from dcpctl.bench.rank_report import document, weights_section
    from dcpctl.bench.rank_run import Grid, measure
    from dcpctl.bench.rank_setup import load
    from dcpctl.runtime import settings
    from dcpctl.runtime.boot import DTYPES
    settings.use(run.launch.runtime)
    with tempfile.TemporaryDirectory(prefix="dcpctl-rank-") as tmp:
        t0 = time.perf_counter()
        model = load(run, Path(tmp), DTYPES[run.launch.model.dtype], checkpoint, seed)
        if model.device.type == "cuda":
            torch.cuda.synchronize()
        weights = weights_section(run, model)
        console.info(f"weights: {_gib(weights['loaded_bytes'])} {'read' if checkpoint else 'generated'} in "
                     f"{time.perf_counter() - t0:.1f} s, the plan's {_gib(weights['plan_bytes'])} "
                     f"({(weights['loaded_bytes'] / max(1, weights['plan_bytes']) - 1) * 100:+.2f}%)")
        routings = ["uniform", "busiest"] if routing == "both" else [routing]
        if not model.cfg.n_routed_experts:
            routings = ["model"]
        grid = Grid(batches, contexts, routings, reps)

        def doc(measured: dict[str, Any]) -> dict[str, Any]:
            kernels = sorted({c.get("attention_backend", "") for c in measured["cells"]} - {""})
            return document(run, measured, weights, _device(run.device), command,
                            ",".join(kernels) or "unknown")

        def save(measured: dict[str, Any]) -> None:
            if out is not None:
                out.write_text(json.dumps({**doc(measured), "partial": True}, indent=1))

        measured = measure(run, model, grid,
                           lambda what: console.info(f"[{time.strftime('%H:%M:%S')}] {what}"), save)
    return doc(measured)


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**28 else f"{n / 2**20:.2f} MiB"


def gpu_name(device: str) -> str | None:
    if device != "cuda":
        return None
    import torch
    return torch.cuda.get_device_name()


def _device(device: str) -> dict[str, Any]:
    if device != "cuda":
        return {"name": "cpu", "memory_bytes": 0, "sm": 0}
    import torch
    p = torch.cuda.get_device_properties(0)
    return {"name": p.name, "memory_bytes": p.total_memory, "sm": p.major * 10 + p.minor}


