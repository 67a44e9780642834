"""`dcpctl export`: turn a valid plan into commands and manifests for a real deployment."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from dcpctl import console
from dcpctl.cli.engine_flags import EngineCommand
from dcpctl.cli.options import collect, plan_options
from dcpctl.launch.exports import EXPORTERS, FORMATS, ExportOptions
from dcpctl.plan.engines import target
from dcpctl.plan.errors import UserError
from dcpctl.plan.planner import make_plan
from dcpctl.plan.resolve import request_from_options


class ExportCommand(EngineCommand):
    format_names_engine = True


@click.command(cls=ExportCommand)
@click.argument("fmt", metavar="FORMAT", type=click.Choice(FORMATS))
@click.argument("saved_plan", required=False, type=click.Path())
@plan_options
@click.option("--served-model-path", help="Model path (or hub id) the nodes load; default: --model-path or the "
                                          "preset's hub id.")
@click.option("--dist-init-addr", default="NODE0_ADDR:5000", show_default=True, help="HOST:PORT of node 0.")
@click.option("--port", type=int, help="HTTP port of the server (default: 30000, vLLM's 8000 under --engine vllm).")
@click.option("--image", help="Container image (k8s; default lmsysorg/sglang:latest, vllm/vllm-openai:vVERSION "
                              "under --engine vllm).")
@click.option("-o", "--output-dir", type=click.Path(file_okay=False), help="Write one file per node/manifest here.")
@click.pass_context
def export(ctx: click.Context, fmt: str, saved_plan: str | None, served_model_path: str | None,
           dist_init_addr: str, port: int | None, image: str | None, output_dir: str | None, **params: Any) -> None:
    """Export a plan as FORMAT: sglang, vllm, torchrun, slurm or k8s.

    \b
    sglang    the `sglang serve` command for every node (and the PD pair + router)
    vllm      the `vllm serve` command for every node (a plan under vLLM's rules: implies --engine vllm)
    torchrun  per-node torchrun commands for the bundled runtime, with the launch.yaml and
              serve.json its ranks read (one node: standalone; several: c10d at --dist-init-addr)
    slurm     an sbatch script starting one task per node
    k8s       a LeaderWorkerSet manifest (leader = node 0)

    `sglang serve` flags the plan passed through are carried as typed (sglang, slurm, k8s). Options
    only the bundled runtime has (a float KV dtype, CPU hardware) are refused for those targets.

    \b
    Examples:
      dcpctl export sglang --preset kimi-k3-32gpu-dpa-dcp8 --dist-init-addr 10.0.0.1:5000
      dcpctl export k8s --preset deepseek-v3.1-tp8-dcp8 -o deploy/
      dcpctl export vllm --model-preset deepseek-v3.1 -tp 8 -dcp 8 --hardware h200-8
      dcpctl export torchrun --preset tiny-cpu -o tiny/ && bash tiny/node-0.sh   # serves on this machine
    """
    opts = collect(ctx, params, saved_plan)
    plan = make_plan(request_from_options(opts))
    if not plan.valid:
        raise UserError("the plan is invalid, nothing to export: " + "; ".join(v.message for v in plan.violations))
    model = served_model_path or opts.get("model_path") or plan.request.model.extra.get("hf_repo")
    if model is None and fmt == "torchrun" and plan.request.model.name == "tiny":
        from dcpctl.launch.default_model import default_model  # the trained checkpoint `dcpctl launch` serves
        model = default_model().path
    engine = target(plan.request.engine)
    port, image = engine.port if port is None else port, image or engine.image   # --port 0: a free port there
    files = EXPORTERS[fmt](plan, ExportOptions(str(model or "MODEL_PATH"), dist_init_addr, port, image=image))
    for w in plan.all_warnings:
        console.warn(w)
    if fmt == "torchrun" and plan.request.engine_args:
        console.warn(f"the bundled runtime does not read these `{' '.join(engine.command)}` flags; not carried: "
                     + " ".join(" ".join(g) for g in plan.request.engine_args))
    if output_dir:
        out = Path(output_dir)
        try:
            out.mkdir(parents=True, exist_ok=True)
            for name, text in files.items():
                (out / name).write_text(text)
                if name.endswith(".sh"):
                    (out / name).chmod(0o755)
        except OSError as e:
            raise UserError(f"cannot write to {out}: {e.strerror or e}") from None
        console.info(f"wrote {', '.join(sorted(files))} to {out}")
        return
    for name, text in files.items():
        console.write_text(f"# ---- {name}\n{text}")
