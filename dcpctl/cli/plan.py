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
from dcpctl.plan.resolve import request_from_options


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
@click.option("--calibration", type=click.Path(exists=True, dir_okay=False), help="Measured cost constants.")
@click.pass_context
def plan(ctx: click.Context, saved_plan: str | None, fmt: str, output: str | None, show_ranks: bool,
         concurrency: int | None, calibration: str | None, **params: Any) -> None:
    """Validate and explain a DCP topology before any GPU is touched.

    Prints the verdict, the rank map (TP, attention-TP, attention-DP, DCP and EP groups, nodes), every
    automatic decision with its reason, and the memory per rank. Exit status 0 when the plan is
    valid, 2 when it is not (each violation is an equation with the valid choices). Verdicts and
    defaults are SGLang 0.5.23's own (docs/plan.md), plus the checks SGLang's arguments cannot see.

    \b
    Examples:
      dcpctl plan --model-path ./DeepSeek-V3.1 --tp-size 8 --dcp-size 8 --hardware h200-8
      dcpctl plan --preset kimi-k3-32gpu-dpa-dcp8 --format json
      dcpctl plan --tp-size 8 --dp-size 4 --enable-dp-attention --dcp-size 4   # invalid: attn_tp 2
    """
    opts = collect(ctx, params, saved_plan)
    if concurrency and not opts.get("context_len"):
        raise UserError("--concurrency needs --context-len (the step-time estimate is per context length)")
    p = build_plan(opts)
    doc = plan_document(p, opts)
    if concurrency and p.valid and opts.get("context_len"):
        doc["estimate"] = p.estimate = _estimate(p, concurrency, calibration)
    if output:
        _save(doc, Path(output))
    if fmt == "table":
        render_table(p, show_ranks)
    else:
        console.write_text(dump(doc, fmt))
    if not p.valid:
        ctx.exit(2)


def _estimate(p: Plan, concurrency: int, calibration: str | None) -> dict[str, Any]:
    """The plan's own choice against DCP 1 from the cost model (dcpctl recommend searches all)."""
    from dcpctl.cli.recommend import constants_for
    from dcpctl.plan.cost import Choice
    from dcpctl.plan.recommend import evaluate, step_ms
    r, d = p.request, p.decisions
    k = constants_for(r, calibration)
    mine = Choice(r.topology.dcp_size, d["dcp_comm_backend"].value if r.topology.dcp_size > 1 else "none",
                  bool(d["dcp_replicate_q_proj"].value))
    rows = [evaluate(r, ch, r.context_len or 1, concurrency, k) for ch in (mine, Choice(1, "none", False))]
    out = {"concurrency": concurrency, "constants": k.source}
    for name, row in zip(("plan", "dcp1"), rows):
        out[name] = {"choice": row.choice.label, "step_attention_ms": step_ms(r, row),
                     "fits": row.valid and row.max_concurrency >= concurrency}
    out["speedup_vs_dcp1"] = out["dcp1"]["step_attention_ms"] / out["plan"]["step_attention_ms"]
    return out


def _save(doc: dict[str, Any], path: Path) -> None:
    fmt = "json" if path.suffix == ".json" else "yaml"
    try:
        path.write_text(dump(doc, fmt) + ("\n" if fmt == "json" else ""))
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None
    console.info(f"saved plan to {path}")
