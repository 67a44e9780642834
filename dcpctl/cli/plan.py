"""`dcpctl plan`: validate, explain and resolve a DCP deployment."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import yaml

from dcpctl.cli import console
from dcpctl.cli.options import collect, plan_options
from dcpctl.cli.render_plan import render_table
from dcpctl.plan.errors import UserError
from dcpctl.plan.planner import Plan, make_plan
from dcpctl.plan.recommend import estimate
from dcpctl.plan.resolve import request_from_options
from dcpctl.plot.output import picture_option


def build_plan(opts: dict[str, Any]) -> Plan:
    return make_plan(request_from_options(opts))


def plan_document(plan: Plan, opts: dict[str, Any], rank_map: bool = True) -> dict[str, Any]:
    doc = plan.to_dict(rank_map=rank_map)
    doc["request"] = {k: v for k, v in opts.items() if v is not None}
    return doc


def dump(doc: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(doc, indent=2)
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=120)


@click.command()
@plan_options
@click.argument("saved_plan", required=False, type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True)
@click.option("-o", "--output", type=click.Path(), help="Also save the plan (YAML, or JSON for *.json).")
@click.option("--rank-map", "show_ranks", is_flag=True, help="Table format: list every rank, even past 16.")
@click.option("--concurrency", type=click.IntRange(min=1), help="With --context-len: add a step-time estimate.")
@click.option("--calibration", type=click.Path(exists=True, dir_okay=False),
              help="Measured cost figures (`dcpctl bench kernel/exchange --save-calibration`): replace the profile's.")
@picture_option("the rank map (nodes, DCP groups, attention-DP replicas)")
@click.pass_context
def plan(ctx: click.Context, saved_plan: str | None, fmt: str, output: str | None, show_ranks: bool,
         concurrency: int | None, calibration: str | None, picture: str | None, **params: Any) -> None:
    """Validate and explain a DCP topology before any GPU is touched.

    Prints the verdict, the rank map (TP, attention-TP, attention-DP, DCP and EP groups, nodes), every
    automatic decision with its reason, and the memory per rank. Exit status 0 when the plan is
    valid, 2 when it is not (each violation is an equation with the valid choices).

    \b
    Examples:
      dcpctl plan --model-path ./DeepSeek-V3.1 --tp-size 8 --dcp-size 8 --hardware h200-8
      dcpctl plan --preset kimi-k3-32gpu-dpa-dcp8 --format json
      dcpctl plan --tp-size 8 --dp-size 4 --enable-dp-attention --dcp-size 4   # invalid: attn_tp 2
      dcpctl plan --preset kimi-k3-32gpu-dpa-dcp8 --picture ranks.png           # draw the rank map
    """
    opts = collect(ctx, params, saved_plan)
    if calibration:
        opts["calibration"] = calibration
    if concurrency and not opts.get("context_len"):
        raise UserError("--concurrency needs --context-len (the step-time estimate is per context length)")
    p = build_plan(opts)
    doc = plan_document(p, opts)
    if concurrency and p.valid and opts.get("context_len"):
        doc["estimate"] = p.estimate = estimate(p, concurrency, opts.get("calibration"))
    if output:
        _save(doc, Path(output))
    if picture:
        from dcpctl.plot.rankmap import save_rank_map  # matplotlib only when a picture is asked for
        save_rank_map(doc, picture)
    if fmt == "table":
        render_table(p, show_ranks)
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
