"""`dcpctl recommend`: search DCP sizes, backends and Q replication for a workload."""
from __future__ import annotations

import json
from typing import Any

import click

from dcpctl import console
from dcpctl.cli.engine_flags import EngineCommand
from dcpctl.cli.options import collect, plan_options, positive_ints
from dcpctl.cli.perf_options import read
from dcpctl.plan.errors import UserError
from dcpctl.plan.figures import UnknownFigures, constants_for
from dcpctl.plan.compose import LONGER_CONTEXT_OVERRIDE, past_positions
from dcpctl.plan.perf_recommend import step_model
from dcpctl.plan.recommend import PAST_POSITIONS, crossovers, recommend
from dcpctl.plan.resolve import request_from_options
from dcpctl.plot.output import picture_option


@click.command(name="recommend", cls=EngineCommand)
@plan_options
@click.option("--concurrency", type=click.IntRange(min=1), required=True,
              help="Concurrent requests to serve.")
@click.option("--contexts", default=None, help="Comma-separated context lengths for the crossover table "
                                                "(default: --context-len, 8K, 32K, 128K).")
@click.option("--calibration", type=click.Path(exists=True, dir_okay=False),
              help="Measured cost figures from `dcpctl bench ... --save-calibration` (replace the profile's; "
                   "needed where no profile matches the GPU).")
@click.option("--measured", type=click.Path(dir_okay=False),
              help="A `dcpctl bench rank --format json` file of one of the choices: its measured compute "
                   "replaces the model's for that choice's cells and calibrates the model's terms for every "
                   "choice.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@picture_option("the crossover (step time against concurrency per choice, one panel per context length)")
@click.pass_context
def recommend_cmd(ctx: click.Context, concurrency: int, contexts: str | None, calibration: str | None,
                  measured: str | None, fmt: str, picture: str | None, **params: Any) -> None:
    """Recommend a DCP size, exchange backend and Q replication for a model, hardware and workload.

    For --context-len L and --concurrency N: per choice, the full decode step's TPOT (compute: weights
    read, GEMMs, attention, small kernels; the collectives as a modelled band; the host gap), the
    attention block's parts and max concurrency, the crossover concurrency per context length (where
    DCP starts to win), and the pick by TPOT with its reason (docs/recommend.md).
    The figures come from the hardware profile (--hardware auto: the profile matching the detected
    GPU) or --calibration; where neither has them, recommend refuses (exit 2) and says how to fix it.
    --picture FILE draws the step time against concurrency for the same context lengths.

    \b
    Examples:
      dcpctl recommend --model-preset deepseek-v3.1 --hardware h200-8 --tp-size 8 --context-len 131072 \\
          --concurrency 32
      dcpctl recommend --preset kimi-k3-32gpu-dpa-dcp8 --concurrency 32 --picture crossover.png
    """
    opts = collect(ctx, params)
    if not opts.get("context_len"):
        raise UserError("dcpctl recommend needs --context-len")
    ctxs = _contexts(contexts, opts["context_len"])
    req = request_from_options({**opts, "calibration": calibration})
    try:
        k = constants_for(req.hardware, req.topology.attn_tp, calibration)
    except UnknownFigures as e:
        raise UserError(f"dcpctl recommend cannot rank the choices: {e}") from None
    model = step_model(req, read(measured), calibration)
    result = recommend(req, opts["context_len"], concurrency, k, model)
    result["crossovers"] = crossovers(req, k, ctxs, model)
    result["decode_terms"] = {"label": model.terms.label, "source": model.terms.source}
    past = [L for L in ctxs if past_positions(req, L)]
    if past:
        result["past_positions"] = {"contexts": past,
                                    "max_position_embeddings": req.model.max_position_embeddings,
                                    "override": LONGER_CONTEXT_OVERRIDE}
    if picture:
        from dcpctl.plot.crossover import save_crossover  # matplotlib only when a picture is asked for
        save_crossover(req, k, result, ctxs, picture)
    if fmt == "json":
        console.write_text(json.dumps(result, indent=2))
    else:
        _render(result)


def _contexts(text: str | None, default: int) -> list[int]:
    if not text:
        return sorted({default, 8192, 32768, 131072})
    return positive_ints(text, "contexts", "context lengths")




def _tpot(t: dict[str, Any]) -> str:
    if "tpot_ms" not in t:
        return ""
    return f"{t['tpot_ms']:.2f} ({t['tpot_low_ms']:.2f}-{t['tpot_high_ms']:.2f})"


def _cell(v: Any) -> str:
    return "past positions" if v == PAST_POSITIONS else "never" if v is None else str(v)


def _render(r: dict[str, Any]) -> None:
    cols = ["choice", "fits", "max conc.", "TPOT (ms)", "step attn (ms)", "kv read (us)", "compute (us)",
            "gemm (us)", "exchange (us)", "tok/s"]
    rows = [[t["choice"], "yes" if t["fits"] else "no", t["max_concurrency"], _tpot(t),
             f"{t['step_attention_ms']:.3f}", f"{t.get('kv_read_us', 0):.1f}",
             f"{t.get('attn_compute_us', 0):.1f}", f"{t.get('gemm_us', 0):.1f}",
             f"{t.get('exchange_us', 0):.1f}", f"{t.get('tokens_per_s', 0):,.0f}"] if t["valid"]
            else [t["choice"], "invalid", "", "", "", "", "", "", "", t["note"]] for t in r["table"]]
    terms = r.get("decode_terms", {})
    console.out.print(console.table(f"Context {r['context_len']:,}, {r['concurrency']} concurrent requests "
                                    f"(TPOT: the full step, compute {terms.get('label', '')}, collectives "
                                    f"modelled; the attention parts per MLA layer; {r['constants']})", cols,
                                    rows))
    ctxs = [k for k in r["crossovers"][0] if k != "choice"] if r["crossovers"] else []
    rows = [[c["choice"], *[_cell(c[L]) for L in ctxs]] for c in r["crossovers"]]
    if rows:
        console.out.print(console.table("Crossover concurrency (DCP beats DCP 1 from here on)",
                                        ["choice", *[f"L={int(L):,}" for L in ctxs]], rows))
        past = r.get("past_positions")
        if past:
            console.out.print(f"past positions: L > the model's {past['max_position_embeddings']:,} "
                              f"max_position_embeddings; SGLang refuses such a --context-length unless "
                              f"{past['override']}", soft_wrap=True)
    else:
        console.out.print("Crossover: no DCP size > 1 is a candidate here (attention TP allows only dcp 1)")
    rec = r["recommendation"]
    console.out.print(f"[bold]Recommendation:[/] {rec['choice'] or 'none'} - {rec['reason']}")
