"""`dcpctl bench rank`: one rank of a plan at the real model's size on this GPU (docs/bench-rank.md).

The command's options and the plan it emulates; the measurements are dcpctl/bench/rank.py's.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from dcpctl import console
from dcpctl.bench.decode import check_writable
from dcpctl.cli.options import collect, plan_options
from dcpctl.launch.device import device_option
from dcpctl.plan.errors import UserError, positive_ints

ROUTING_CHOICES = ("uniform", "busiest", "both", "model")


@click.command()
@plan_options
@device_option()
@click.option("--rank", "rank_opt", type=click.IntRange(min=0),
              help="Global rank to run (default: the busiest, 0).")
@click.option("--batches", default="1,8,32,64", show_default=True, help="Requests per decode step.")
@click.option("--contexts", default="8192,32768,131072", show_default=True,
              help="Cached positions per request.")
@click.option("--layers", type=click.IntRange(min=1),
              help="Run the first N layers (dense and MoE in the model's proportion) and scale per layer.")
@click.option("--routing", type=click.Choice(ROUTING_CHOICES), default="both", show_default=True,
              help="MoE expert choice: uniform (balanced), busiest (the busiest EP rank's rows), both, or "
                   "model (the router's own).")
@click.option("--weights", "weights_from", type=click.Choice(["synthetic", "checkpoint"]),
              default="synthetic", show_default=True,
              help="Generate rank R's slices on the device, or read them from --model-path.")
@click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float16"]), default=None,
              help="Compute dtype (default: bfloat16 on CUDA, float32 on CPU).")
@click.option("--reps", type=click.IntRange(min=3), default=7, show_default=True, help="Timed reps per cell.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the synthetic weights.")
@click.option("--out", type=click.Path(dir_okay=False), help="Write the measured file (JSON) here.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="json: print the measured file instead of the tables.")
@click.pass_context
def command(ctx: click.Context, device: str, rank_opt: int | None, batches: str, contexts: str,
            layers: int | None, routing: str, weights_from: str, dtype: str | None, reps: int, seed: int,
            out: str | None, fmt: str, **params: Any) -> None:
    """Measure one rank of a plan at the real model's size on this GPU.

    Runs rank R (default: the busiest) of the plan the flags describe, with its weight slices generated on the
    GPU and its collectives answered by stand-in groups, and measures per --batches x --contexts cell the
    CUDA-graph decode step with lm_head (the stand-in copies timed and subtracted), the peak memory at the
    plan's max_concurrency for its context, and the served loop's host gap.  Writes the file
    `dcpctl plan --measured` reads.  Refuses what `dcpctl launch` refuses, and a GPU other than the plan's
    hardware (an H100 stands in for an H200 only with --layers).  On the CPU the step runs eagerly (the tiny
    model; tests).

    \b
    Examples:
      dcpctl bench rank --model-preset deepseek-v3.1 --tp-size 8 --dcp-size 8 --hardware h200-8 --out v31.json
      dcpctl bench rank --model-preset kimi-k2 --tp-size 16 --dcp-size 8 --nnodes 2 --hardware h200-8 \\
          --layers 8
      dcpctl bench rank --device cpu --tp-size 4 --dcp-size 2 --batches 2 --contexts 64
    """
    if out:
        check_writable(Path(out), "--out")
    grid_b, grid_l = positive_ints(batches, "batches"), positive_ints(contexts, "contexts")
    if weights_from == "checkpoint" and (not params.get("model_path") or layers):
        raise UserError("--weights checkpoint reads --model-path DIR's safetensors, all its layers (no "
                        "--layers)")
    plan, launch, dev, served = _plan(ctx, params, device, dtype, grid_b, grid_l)
    from dcpctl.bench.rank import gpu_name, run_bench
    from dcpctl.bench.rank_setup import check_gpu, resolve
    run = resolve(plan, launch, rank_opt, layers, dev, served)
    check_gpu(plan.request.hardware, dev, layers, gpu_name(dev))
    console.info(f"rank {run.rank} ({run.rank_reason}); {run.layers_run} of {run.num_layers} layers "
                 f"({run.dense_run} dense, {run.moe_run} MoE){_scaled(run)}")
    doc = run_bench(run, grid_b, grid_l, routing, reps, seed,
                    Path(params["model_path"]) if weights_from == "checkpoint" else None, _command_line(ctx),
                    Path(out) if out else None)
    from dcpctl.bench.rank_report import print_tables
    if fmt == "json":
        console.write_text(json.dumps(doc, indent=1))
    else:
        print_tables(doc)
    if out:
        Path(out).write_text(json.dumps(doc, indent=1))
        console.info(f"wrote {out}")
    else:
        console.info("the projection (compute + modelled communication + host gap) is `dcpctl plan "
                     "--measured FILE`'s: pass --out FILE")


def _plan(ctx: click.Context, params: dict[str, Any], device: str, dtype: str | None, batches: list[int],
          contexts: list[int]) -> tuple:
    """(plan, launch config as `dcpctl launch` renders it, device, the served phase's requests and context):
    refusals as launch's; the engine's KV holds the served phase's requests (a server sized for them)."""
    from dcpctl.bench.rank_setup import served_point, served_tokens
    from dcpctl.cli.generate import show_plan_warnings
    from dcpctl.launch.config import render_launch_config, served_page
    from dcpctl.launch.device import resolve_device
    from dcpctl.plan.planner import make_plan
    from dcpctl.plan.resolve import request_from_options
    opts = collect(ctx, params)
    dev = resolve_device(device, ranks_here=1)
    if (ctx.get_parameter_source("hardware") != click.core.ParameterSource.COMMANDLINE
        and not opts.get("hardware")):
        opts["hardware"] = "cpu" if dev == "cpu" else "auto"
    opts["context_len"] = opts.get("context_len") or max(contexts)
    plan = make_plan(request_from_options(opts))
    show_plan_warnings(plan)
    if plan.request.disaggregation_mode != "null":
        raise UserError("`bench rank` runs a plain decode instance: drop --disaggregation-mode")
    dtype = dtype or ("bfloat16" if dev == "cuda" else "float32")
    point = served_point(plan, batches, contexts)
    capacity = served_tokens(plan, point, served_page(plan, dev))
    launch = render_launch_config(plan, opts.get("model_path") or ".", dtype, dev, capacity,
                                  8192).for_serving()
    return plan, launch, dev, point


def _scaled(run: Any) -> str:
    if not run.scaled:
        return ""
    return (f"; compute scaled to {run.num_layers} layers as base + (step - base) x {run.num_layers}/"
            f"{run.layers_run}, base = the step without decoder layers")


def _command_line(ctx: click.Context) -> str:
    """The command as typed: the flags given on the command line, with their values."""
    words = ["dcpctl", "bench", "rank"]
    for p in ctx.command.params:
        if ctx.get_parameter_source(p.name) != click.core.ParameterSource.COMMANDLINE:
            continue
        value = ctx.params.get(p.name)
        flag = p.opts[0] if isinstance(value, bool) is False or value else (p.secondary_opts or p.opts)[0]
        words += [flag] if isinstance(value, bool) else [flag, str(value)]
    return " ".join(words)
