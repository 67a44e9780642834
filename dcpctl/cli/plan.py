"""`dcpctl plan`: validate, explain and resolve a DCP deployment."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import yaml

from dcpctl import console
from dcpctl.cli.engine_flags import EngineCommand
from dcpctl.cli.generate import DEFAULT_PRESET  # what `dcpctl launch` runs without flags
from dcpctl.cli.options import PLAN_KEYS, collect, plan_options
from dcpctl.cli.pasted import split_args
from dcpctl.cli.perf_options import perf_options, read, workload
from dcpctl.cli.render_perf import render_performance
from dcpctl.cli.render_plan import render_table
from dcpctl.plan.errors import UserError
from dcpctl.plan.perf_report import performance
from dcpctl.plan.planner import Plan, make_plan
from dcpctl.plan.recommend import estimate
from dcpctl.plan.resolve import NO_MODEL, has_model, request_from_options
from dcpctl.plot.output import picture_option


def build_plan(opts: dict[str, Any]) -> Plan:
    """A model named by --model-path/--model-preset/--preset: the full plan; none: the topology-only
    verdict."""
    if has_model(opts):
        return make_plan(request_from_options(opts))
    return make_plan(request_from_options(opts, model=NO_MODEL), topology_only=True)


def _plan_options(ctx: click.Context, params: dict[str, Any], saved_plan: str | None) -> dict[str, Any]:
    """No flags at all (and no saved plan): plan what `dcpctl launch` runs, and say so."""
    typed = [k for k in PLAN_KEYS if ctx.get_parameter_source(k) == click.core.ParameterSource.COMMANDLINE]
    if saved_plan or typed:
        return collect(ctx, params, saved_plan)
    console.info(f"no flags: planning what `dcpctl launch` runs (preset {DEFAULT_PRESET}); pass topology "
                 "flags for a topology-only verdict, or a model for the full plan")
    return collect(ctx, {**params, "preset": DEFAULT_PRESET})


def plan_document(plan: Plan, opts: dict[str, Any], rank_map: bool = True) -> dict[str, Any]:
    doc = plan.to_dict(rank_map=rank_map)
    doc["request"] = {k: v for k, v in opts.items() if v is not None}
    return doc


def dump(doc: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(doc, indent=2)
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=120)


@click.command(cls=EngineCommand)
@plan_options
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("--format", "fmt", type=click.Choice(["table", "json", "yaml"]), default="table",
              show_default=True)
@click.option("-o", "--output", type=click.Path(), help="Also save the plan (YAML, or JSON for *.json).")
@click.option("--rank-map", "show_ranks", is_flag=True, help="Table format: list every rank, even past 16.")
@click.option("--concurrency", type=click.IntRange(min=1),
              help="Performance: requests in flight (default 32); with --context-len also the "
                   "attention estimate.")
@click.option("--calibration", type=click.Path(exists=True, dir_okay=False),
              help="Measured cost figures (`dcpctl bench kernel/exchange --save-calibration`): replace the "
                   "profile's.")
@perf_options
@picture_option("the rank map (nodes, DCP groups, attention-DP replicas)")
@click.pass_context
def plan(ctx: click.Context, args: tuple[str, ...], fmt: str, output: str | None, show_ranks: bool,
         concurrency: int | None, calibration: str | None, input_len: int | None, output_len: int | None,
         measured: str | None, picture: str | None, **params: Any) -> None:
    """Validate and explain a DCP topology before any GPU is touched.

    Prints the verdict, the rank map (TP, attention-TP, attention-DP, DCP and EP groups, nodes), every
    automatic decision with its reason, the memory per rank, and the predicted TPOT, TTFT and output tok/s
    per GPU with DCP off and as planned, each figure labelled measured, calibrated, derived, assumed or
    modelled (--input-len, --output-len, --concurrency; --measured FILE). Exit status 0 when the plan is
    valid, 2 when it is not (each violation is an equation with the valid choices). Verdicts and
    defaults are SGLang 0.5.23's own (docs/plan.md), plus the checks SGLang's arguments cannot see.

    Without a model (--model-path, --model-preset or --preset) the verdict rests on the topology and
    the hardware alone, and the model checks it skipped are listed. With no flags at all it plans what
    `dcpctl launch` runs (preset tiny-cpu). ARGS: a plan saved with -o (flags override it), or after `--`
    a whole pasted `vllm serve ...` line. `--engine vllm` applies vLLM's rules and defaults instead
    (docs/vllm.md) and takes vLLM's flag names.

    Every flag of SGLang 0.5.23's `sglang serve` is accepted under its names, aliases and
    abbreviations: modelled where it changes the plan, else listed as passed through (and carried by
    `dcpctl export sglang`). A whole pasted `sglang serve ...` or `python -m sglang.launch_server ...`
    line works. A Hugging Face id whose config dcpctl ships plans offline from that model preset.

    \b
    Examples:
      dcpctl plan --model-preset deepseek-v3.1 --tp-size 8 --dcp-size 8 --hardware h200-8
      dcpctl plan --model-path DIR --tp-size 8 --dcp-size 8   # DIR: a checkpoint with config.json
      dcpctl plan --tp-size 64 --dp-size 4 --enable-dp-attention --dcp-size 16   # topology only
      dcpctl plan --preset kimi-k3-32gpu-dpa-dcp8 --format json
      dcpctl plan --tp-size 8 --dp-size 4 --enable-dp-attention --dcp-size 4   # invalid: attn_tp 2
      dcpctl plan --preset kimi-k3-32gpu-dpa-dcp8 --picture ranks.png           # draw the rank map
      dcpctl plan --engine vllm --model-preset deepseek-v3.1 -tp 8 -dcp 8 --hardware h200-8
      dcpctl plan --hardware h200-8 -- vllm serve DIR -tp 8 -dcp 8 --block-size 64
      dcpctl plan --hardware h200-8 -- sglang serve --model-path deepseek-ai/DeepSeek-V3.1 --tp 8 \\
          --trust-remote-code
    """
    pasted, saved_plan = split_args(args)  # `-- vllm serve ...`: the pasted line's options, as if typed
    opts = {**collect(ctx, params), **pasted} if pasted else _plan_options(ctx, params, saved_plan)
    if calibration:
        opts["calibration"] = calibration
    p = build_plan(opts)
    if concurrency and p.topology_only:
        raise UserError("--concurrency needs a model (the Performance workload, the estimate): pass "
                        "--model-path, --model-preset or --preset")
    doc = plan_document(p, opts)
    if concurrency and not opts.get("context_len"):  # the Performance workload takes it alone
        console.info("no attention estimate: it is per context length, pass --context-len for it")
    elif concurrency and p.valid:
        doc["estimate"] = p.estimate = estimate(p, concurrency, opts.get("calibration"))
    perf = performance(p, workload(input_len, output_len, concurrency), read(measured),
                       opts.get("calibration"))
    if perf is not None:
        doc["performance"] = perf
    if output:
        _save(doc, Path(output))
    if picture:
        from dcpctl.plot.rankmap import save_rank_map  # matplotlib only when a picture is asked for
        save_rank_map(doc, picture)
    if fmt == "table":
        render_table(p, show_ranks)
        render_performance(perf)
    else:
        console.write_text(dump(doc, fmt))
    if not p.valid:
        ctx.exit(2)


def _save(doc: dict[str, Any], path: Path) -> None:
    fmt = "json" if path.suffix == ".json" else "yaml"
    try:
        path.write_text(dump(doc, fmt) + ("\n" if fmt == "json" else ""))
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None
    console.info(f"saved plan to {path}")
