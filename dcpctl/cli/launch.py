"""`dcpctl launch`: plan, render the launch config, start the runtime under torchrun and serve."""
from __future__ import annotations

import json
import shlex
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import click
import yaml

from dcpctl import console
from dcpctl.cli.generate import (GRAPH_FLAGS, SCHEDULE_FLAGS, check_chunk, check_devices, cuda_graph_options,
                                 fill_default_model, resolve_run_options, runtime_options, schedule_options,
                                 settle_device, show_plan_warnings)
from dcpctl.cli.options import collect, plan_options
from dcpctl.cli.serve_flags import SERVE_FLAGS, check_access, json_whitespace, serve_flags, serve_options
from dcpctl.plan.errors import UserError
from dcpctl.plan.planner import make_plan
from dcpctl.plan.resolve import request_from_options

@click.command()
@click.argument("config", required=False, type=click.Path(exists=True, dir_okay=False))
@plan_options
@runtime_options
@click.option("--node-rank", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--dist-init-addr", default="127.0.0.1:29500", show_default=True,
              help="HOST:PORT of node 0 (single node: a free port unless given).")
@serve_flags
@click.option("--dry-run", is_flag=True, help="Print the launch config and the torchrun command(s); start nothing.")
@click.pass_context
def launch(ctx: click.Context, config: str | None, dtype: str | None, device: str, max_total_tokens: int,
           chunked_prefill_size: int, node_rank: int, dist_init_addr: str, dry_run: bool, **params: Any) -> None:
    """Serve a model over an OpenAI-compatible HTTP API (continuous batching, DCP runtime).

    Plans the topology (exit 2 if invalid), renders the launch config, starts every rank of this
    node under torchrun and, on node 0, serves http://HOST:PORT until Ctrl-C or SIGTERM.  Without
    --model-path the built-in tiny DeepSeek-V3-shaped model trained on Python
    stdlib sources runs on 2 CPU ranks with DCP 2.  CONFIG is a saved plan
    (`dcpctl plan -o plan.yaml`) or a launch config (`--dry-run` output); flags override a plan.
    Keep the API key out of `ps`: export DCPCTL_API_KEY instead of passing --api-key.

    \b
    Examples:
      dcpctl launch                                              # tiny model, http://127.0.0.1:30000
      dcpctl launch --model-path DIR --tp-size 8 --dcp-size 8       # on the GPUs when visible
      dcpctl launch --preset NAME --nnodes 2 --node-rank 0 --dist-init-addr 10.0.0.1:5000
      dcpctl launch --dry-run                                    # launch config + torchrun argv
    """
    from dcpctl.launch.torchrun import free_port, runtime_env, torchrun_argv
    check_chunk(chunked_prefill_size)
    graph_flags = {k: params.pop(k, None) for k in GRAPH_FLAGS}
    schedule_flags = {k: params.pop(k, None) for k in SCHEDULE_FLAGS}
    flags = {k: params.pop(k) for k in SERVE_FLAGS}
    cfg, nnodes, summary, context = _launch_config(ctx, config, params, dtype, device, max_total_tokens,
                                                   chunked_prefill_size)
    device = cfg["device"]
    if cfg.get("cuda_graph") is None:   # a given launch config keeps its own sections
        cfg["cuda_graph"] = cuda_graph_options(graph_flags, cfg["device"], cfg["kv"]["max_running_requests"],
                                               cfg["kv"]["chunked_prefill_size"])
    if cfg.get("schedule") is None:
        cfg["schedule"] = schedule_options(schedule_flags, int(cfg["kv"]["chunked_prefill_size"]))
    mhost, _, mport = dist_init_addr.rpartition(":")
    if not mhost or not mport.isdigit():
        raise UserError(f"--dist-init-addr must be HOST:PORT, got {dist_init_addr!r}")
    from dcpctl.launch.http_workers import http_workers
    workers, why = http_workers(flags["tokenizer_worker_num"], cfg["device"], int(cfg["kv"]["max_running_requests"]))
    json_whitespace(flags, cfg["model"]["path"])
    serve_opts = serve_options(flags, Path(cfg["model"]["path"]).name, workers, context)
    if dry_run:
        _print_dry_run(cfg, nnodes, mhost, int(mport), runtime_env("launch.yaml", serve=json.dumps(serve_opts)),
                       flags["api_key"] is not None)
        return
    check_access(flags["host"], flags["api_key"], flags["allow_unauthenticated"])
    if node_rank >= nnodes:
        raise UserError(f"--node-rank ({node_rank}) must be < nnodes ({nnodes})")
    check_devices(device, int(cfg["world_size"]) // nnodes)
    if node_rank == 0:
        _check_port_free(flags["host"], flags["port"])
    explicit_addr = ctx.get_parameter_source("dist_init_addr") == click.core.ParameterSource.COMMANDLINE
    master_port = int(mport) if nnodes > 1 or explicit_addr else free_port()
    console.info(f"HTTP workers: {workers} ({why})")
    from dcpctl.cli.generate import check_weights
    check_weights(cfg["model"]["path"])
    argv = torchrun_argv(cfg, nnodes, node_rank, mhost, master_port)
    _serve(cfg, argv, serve_opts, flags["api_key"], summary, node_rank)


def _launch_config(ctx: click.Context, config: str | None, params: dict[str, Any], dtype: str, device: str,
                   max_total_tokens: int, chunk: int) -> tuple[dict[str, Any], int, str, int | None]:
    """(launch config, nnodes, plan summary, --context-len) from flags, a saved plan or a launch config."""
    from dcpctl.contract.launch_config import LaunchConfig, LaunchConfigError
    from dcpctl.launch.config import render_launch_config
    if config is not None:
        from dcpctl.plan.yamlio import read_yaml
        data = read_yaml(Path(config))
        if "groups" in data and "world_size" in data:  # already a launch config
            try:
                typed = LaunchConfig.from_dict(data).for_serving(params.get("max_running_requests"))
            except LaunchConfigError as e:
                raise LaunchConfigError(f"{config}: {e}") from None
            cfg = typed.to_dict()
            return cfg, int(params.get("nnodes") or 1), _summary(cfg), params.get("context_len")
        opts = collect(ctx, params, config)
        fill_default_model(opts, f"the saved plan {config} has no model_path: pass --model-path DIR")
    else:
        opts = resolve_run_options(ctx, params, "cpu" if device == "auto" else device)
    opts, device = settle_device(ctx, opts, device)
    dtype = dtype or ("bfloat16" if device == "cuda" else "float32")
    plan = make_plan(request_from_options(opts))
    show_plan_warnings(plan)
    if plan.request.disaggregation_mode != "null":
        raise UserError("the bundled runtime serves PD disaggregation only in batch mode: run both sides with "
                        "`dcpctl generate --disaggregation-mode ...`, or deploy with `dcpctl export sglang`")
    cfg = render_launch_config(plan, opts["model_path"], dtype, device, max_total_tokens, chunk).for_serving().to_dict()
    return cfg, plan.request.topology.nnodes, _summary(cfg), plan.request.context_len


def _check_port_free(host: str, port: int) -> None:
    """A taken --port fails here in a second, not after every rank has loaded the model."""
    import socket
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise UserError(f"--host {host}: cannot resolve ({e.strerror})") from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as e:
            raise UserError(f"cannot serve on {host}:{port}: {e.strerror or e}; pick another --port "
                            "(0 picks a free one)") from None


def _summary(cfg: dict[str, Any]) -> str:
    from dcpctl.launch.default_model import describe
    t, d, kv = cfg["topology"], cfg["decisions"], cfg["kv"]
    what = describe(cfg["model"]["path"])  # a trained checkpoint says what it is (training.json)
    return (f"{Path(cfg['model']['path']).name}{f' ({what})' if what else ''} on {cfg['world_size']} {cfg['device']} "
            f"rank(s): tp {t['tp_size']}, "
            f"attn_dp {t['attn_dp_size']}, dcp {t['dcp_size']} ({d['dcp_comm_backend']}"
            f"{', replicated q' if d['dcp_replicate_q_proj'] else ''}), {cfg['model']['dtype']}, "
            f"KV {kv['capacity_tokens'] * t['dcp_size']} virtual tokens per replica")


def _print_dry_run(cfg: dict[str, Any], nnodes: int, host: str, port: int, env: dict[str, str], key: bool) -> None:
    """The launch config, then each node's command as it runs from the folder holding launch.yaml (the server
    options travel inline in $DCPCTL_SERVE; node 0 serves them)."""
    from dcpctl.launch.torchrun import torchrun_argv
    console.write_text("# launch config (save as launch.yaml)\n" + yaml.safe_dump(cfg, sort_keys=False,
                                                                                    default_flow_style=None))
    if key:
        console.write_text("# the API key: rank 0 reads $DCPCTL_API_KEY from the environment (export it first)")
    for node in range(nnodes):
        argv = torchrun_argv(cfg, nnodes, node, host, port)
        envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        console.write_text(f"# node {node}\n{envs} {shlex.join(argv)}")


def _serve(cfg: dict[str, Any], argv: list[str], serve_opts: dict[str, Any], api_key: str | None, summary: str,
           node_rank: int) -> None:
    from dcpctl.launch.runner import Bars, RuntimeFailed, ServeProcess, write_launch_files
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with tempfile.TemporaryDirectory(prefix="dcpctl-serve-") as tmp:
        # the key reaches the ranks in their environment (readable by this user only), never these files
        env = write_launch_files(Path(tmp), cfg, serve=serve_opts) | {"DCPCTL_API_KEY": api_key or ""}
        console.info(f"starting {summary}")
        proc = None
        try:
            with Bars() as bars:  # the cold start: ranks starting, then rank 0 loading the weights
                bars.step("starting torchrun and the ranks", 0, None)
                proc = ServeProcess(argv, env, on_progress=bars.step)
                url = proc.wait_ready(stop) if node_rank == 0 else None
                proc.on_progress = None
            if url is not None:
                _print_ready(url, serve_opts, api_key is not None, summary)
            elif node_rank != 0:
                console.info(f"node {node_rank}: ranks started; node 0 serves the API")
            proc.wait(stop)
        except RuntimeFailed as e:
            console.error(str(e))  # console.error escapes markup itself
            raise SystemExit(1) from None
        finally:
            if proc is not None and proc.proc.poll() is None:
                proc.terminate()
    console.info("stopped")


def _print_ready(url: str, serve_opts: dict[str, Any], key: bool, summary: str) -> None:
    body = json.dumps({"model": serve_opts["served_model_name"], "prompt": "Hello", "max_tokens": 16})
    auth = ' -H "Authorization: Bearer $DCPCTL_API_KEY"' if key else ""  # the shell expands it
    console.write_text(f"dcpctl: serving at {url} ({summary})")
    console.write_text(f"try: curl {url}/v1/completions -H 'Content-Type: application/json'{auth} -d '{body}'")
    sys.stdout.flush()
    console.info("press Ctrl-C to stop")
