"""`bench rank`'s measurements on a loaded emulated rank: every batch x context cell, then the served phase.

    measure(run, model, grid, progress, save)
        -> {"served": ..., "cells": [...], "skipped": [...], "base_us": ...}

`save(partial)` is called after every cell and at the end, so a run stopped midway keeps what it measured.

Cells run batch by batch; one captured graph per (batch, context) serves both fixed routings (uniform and
busiest: bench/rank_routing.py writes each one's expert choice into buffers the graph reads), and `model` (the
router's own choice) is a graph of its own.  Under --layers a step's compute is scaled
to the model's depth as base + (compute - base) * num_layers / layers_run, where base is the same step with no
decoder layer (embedding, final norm, lm_head, sampling), measured per batch: the layers run are the model's
dense and MoE layers in its proportion, and nothing else in a step grows with depth.
"""
from __future__ import annotations

import gc
import statistics
from dataclasses import dataclass
from typing import Any, Callable

import torch

from dcpctl.bench import rank_routing
from dcpctl.bench.rank_cell import Cell, aggregate, without_layers

ROOM_MARGIN = 3 << 30     # bytes a cell keeps free beyond its KV pool (graph activations, logits)


@dataclass(frozen=True)
class Grid:
    batches: list[int]
    contexts: list[int]
    routings: list[str]
    reps: int


def measure(run: Any, model: Any, grid: Grid, progress: Callable[[str], None],
            save: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    dp, served = run.launch.topology.attn_dp_size, run.served
    routers = rank_routing.install(model, dp * max(grid.batches + [served[0]]))
    _precompile(model, grid.batches + [served[0]], dp)
    out: dict[str, Any] = {"served": None, "cells": [], "skipped": [], "base_us": {}}
    _cells(run, model, grid, routers, out, progress, save)
    if model.device.type == "cuda":
        progress(f"served phase: the engine at {served[0]} requests x {served[1]} positions")
        # the served engine and its twin below read the same experts: uniform where the bench fixes the
        # routing (the router's own choice would follow each one's tokens, which differ), else the router's
        # own
        _route(run, model, routers, "uniform" if routers else "model", served[0])
        out["served"] = _served(run, model, *served)
        if "served_step_us" in out["served"]:
            out["served"].update(_bench_step(run, model, *served, grid.reps))
    save(out)
    return out


def _cells(run: Any, model: Any, grid: Grid, routers: list, out: dict[str, Any],
           progress: Callable[[str], None], save: Callable[[dict[str, Any]], None]) -> None:
    for b in grid.batches:
        base = _base_us(run, model, b) if run.scaled else 0.0
        out["base_us"][b] = base
        for L in grid.contexts:
            progress(f"batch {b} x context {L}")
            why = _no_room(model, b, L)
            if why:
                out["skipped"].append({"batch": b, "context": L, "reason": why})
                continue
            for group in _graph_groups(grid.routings):
                _route(run, model, routers, group[0], b)       # before the capture: which choice the graph
                                                               # reads
                cell = _cell(run, model, b, L)
                if isinstance(cell, str):
                    out["skipped"].append({"batch": b, "context": L, "routing": ",".join(group),
                                           "reason": cell})
                    continue
                out["cells"] += [_timed(run, model, cell, routers, grid, r, base) for r in group]
                cell.close()
                _release()
                save(out)


def _graph_groups(routings: list[str]) -> list[list[str]]:
    """The routings one captured graph serves together: the fixed ones, then `model` alone."""
    fixed = [r for r in routings if r != "model"]
    return [g for g in (fixed, [r for r in routings if r == "model"]) if g]


def _route(run: Any, model: Any, routers: list, routing: str, batch: int) -> dict[str, float]:
    ps = model.ps
    tokens = batch * run.launch.topology.attn_dp_size
    return rank_routing.choose(routers, model.cfg, routing, tokens, ps.ep.size, ps.ep.rank) if routers else {}


def _served(run: Any, model: Any, batch: int, ctx: int) -> dict[str, Any]:
    from dcpctl.bench.rank_served import run_served
    try:
        return run_served(model, run.launch, batch, ctx)
    except torch.cuda.OutOfMemoryError as e:
        return {"batch": batch, "context": ctx, "error": f"out of GPU memory: {str(e).splitlines()[0][:200]}"}
    finally:
        _release()


def _bench_step(run: Any, model: Any, batch: int, ctx: int, reps: int) -> dict[str, Any]:
    # this bench's own graph step at the served batch and context, the served phase's routing: its twin
    cell = _cell(run, model, batch, ctx)
    if isinstance(cell, str):
        return {"bench_error": cell}
    try:
        return {"bench_step_us": round(statistics.median(cell.times_us(reps)), 2)}
    finally:
        cell.close()
        _release()


def _cell(run: Any, model: Any, batch: int, ctx: int) -> Cell | str:
    try:
        return Cell(model, run.launch.decisions, batch, ctx, run.launch.kv.page_size,
                    run.launch.kv.capacity_tokens)
    except torch.cuda.OutOfMemoryError:
        _release()
        return "out of GPU memory while capturing its graph"


def _timed(run: Any, model: Any, cell: Cell, routers: list, grid: Grid, routing: str,
           base: float) -> dict[str, Any]:
    batch, ctx = len(cell.chunks), cell.chunks[0].start
    routed = _route(run, model, routers, routing, batch)
    times = cell.times_us(grid.reps)
    step = statistics.median(times)
    standin = cell.standin_us
    compute = step - standin
    full = base + (compute - base) * run.num_layers / run.layers_run if run.scaled else compute
    return {"batch": batch, "context": ctx, "routing": routing, "step_us": round(step, 2),
            "standin_us": round(standin, 2), "compute_us": round(compute, 2),
            "compute_us_full": round(full, 2), "reps": len(times),
            "spread": round((max(times) - min(times)) / step, 4), "collectives": aggregate(cell.calls),
            "bucket_rows": cell.bucket_rows, "attention_backend": cell.kernel, **routed}


def _base_us(run: Any, model: Any, batch: int) -> float:
    # the step without decoder layers, its own stand-in copies subtracted
    page = run.launch.kv.page_size
    with without_layers(model):
        cell = Cell(model, run.launch.decisions, batch, page * model.ps.dcp.size, page, page)
        try:
            return statistics.median(cell.times_us(5)) - cell.standin_us
        finally:
            cell.close()


def _no_room(model: Any, batch: int, ctx: int) -> str | None:
    if model.device.type != "cuda":
        return None
    c, cfg = model.ps.dcp.size, model.cfg
    rows = batch * -(-(ctx + 1) // c) + 64
    need = cfg.num_layers * rows * cfg.latent_dim * model.norm.element_size()
    free = torch.cuda.mem_get_info()[0] + torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
    if need + ROOM_MARGIN <= free:
        return None
    return (f"its KV pool ({need / 2**30:.1f} GiB) and {ROOM_MARGIN >> 30} GiB of headroom exceed the free "
            f"{free / 2**30:.1f} GiB")


def _precompile(model: Any, batches: list[int], dp: int) -> None:
    if model.device.type != "cuda":
        return
    from dcpctl.runtime.models.fp8_precompile import precompile
    precompile(model, {b for b in batches}, dp)


def _release() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
