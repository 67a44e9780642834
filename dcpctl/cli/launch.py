"""`dcpctl launch`: plan, render the launch config and start the runtime under torchrun."""
from __future__ import annotations

import shlex
from typing import Any

import click
import yaml

from dcpctl.cli import console
from dcpctl.cli.generate import resolve_run_options
from dcpctl.cli.options import plan_options
from dcpctl.plan.errors import UserError
from dcpctl.plan.planner import make_plan
from dcpctl.plan.resolve import request_from_options


@click.command()
@plan_options
@click.option("--dtype", type=click.Choice(["float64", "float32", "bfloat16", "float16"]), default=None,
              help="Compute dtype (default: float32 on CPU, bfloat16 on CUDA).")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--max-total-tokens", type=click.IntRange(min=1), default=16384, show_default=True,
              help="Virtual KV tokens to allocate (capped by the plan's capacity).")
@click.option("--chunked-prefill-size", type=int, default=8192, show_default=True)
@click.option("--node-rank", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--dist-init-addr", default="127.0.0.1:29500", show_default=True, help="HOST:PORT of node 0.")
@click.option("--dry-run", is_flag=True, help="Print the launch config and the torchrun command(s); start nothing.")
@click.pass_context
def launch(ctx: click.Context, dtype: str | None, device: str, max_total_tokens: int, chunked_prefill_size: int,
           node_rank: int, dist_init_addr: str, dry_run: bool, **params: Any) -> None:
    """Plan, render the launch config and start the bundled runtime under torchrun.

    With --dry-run, prints the launch config (YAML) and the exact torchrun command for every node.
    Without --model-path the built-in tiny model on 2 CPU ranks with DCP 2 is used.
    """
    from dcpctl.launch.config import render_launch_config
    from dcpctl.launch.torchrun import runtime_env, torchrun_argv
    opts = resolve_run_options(ctx, params, device)
    plan = make_plan(request_from_options(opts))
    dtype = dtype or ("bfloat16" if device == "cuda" else "float32")
    cfg = render_launch_config(plan, opts["model_path"], dtype, device, max_total_tokens, chunked_prefill_size)
    host, _, port = dist_init_addr.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--dist-init-addr must be HOST:PORT, got {dist_init_addr!r}")
    nnodes = plan.request.topology.nnodes
    if not dry_run:
        raise UserError("serving is not built yet (see the serving issue); use --dry-run or `dcpctl generate`")
    console.write_text("# launch config (save as launch.yaml)\n" + yaml.safe_dump(cfg, sort_keys=False,
                                                                                    default_flow_style=None))
    env = runtime_env("launch.yaml")
    for node in range(nnodes):
        argv = torchrun_argv(cfg, nnodes, node, host, int(port))
        envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        console.write_text(f"# node {node}\n{envs} {shlex.join(argv)}")
