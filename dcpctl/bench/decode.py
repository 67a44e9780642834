"""`dcpctl bench decode`: time the striped decode step end to end for several DCP sizes.

On CUDA the context takes the paged path (Triton MLA kernel over a block table), `--cuda-graphs`
also replays each cell's step as a CUDA graph, and each row carries the planner's roofline
prediction (plan/cost.py, ceilings measured at the start of the run) and measured/predicted;
see bench/decode_cell.py.

For each DCP size the same TP world runs the real runtime (model, allocator, pool, DCP context,
exchange) on a synthetic checkpoint of a chosen shape: B requests whose first L positions are
already cached (random latent rows; only their timing matters), then timed decode steps of one
token per request. Reported per (dcp, B, L): forward time per step, the batch-layout build time
(host bookkeeping, outside the forward), the KV bytes each rank read per step, and ratios to DCP 1.
"""
from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from dcpctl.launch.device import device_option

from dcpctl.plot.output import picture_option

SHAPES: dict[str, dict[str, Any]] = {
    "tiny": {},
    "small": {"hidden_size": 512, "num_attention_heads": 16, "num_key_value_heads": 16, "q_lora_rank": 128,
              "kv_lora_rank": 128, "qk_nope_head_dim": 32, "qk_rope_head_dim": 32, "v_head_dim": 32,
              "intermediate_size": 512, "num_hidden_layers": 2, "first_k_dense_replace": 2},
    # DeepSeek-V3 attention (128 heads, kv_lora 512, rope 64), a small dense MLP, a few layers
    "v3": {"hidden_size": 7168, "num_attention_heads": 128, "num_key_value_heads": 128, "q_lora_rank": 1536,
           "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
           "intermediate_size": 2048, "num_hidden_layers": 2, "first_k_dense_replace": 2},
}


def _groups(tp: int, dcp: int) -> dict[str, list[list[int]]]:
    from dcpctl.plan.groups import build_groups
    from dcpctl.plan.topology import Topology
    return build_groups(Topology(tp_size=tp, dcp_size=dcp))


def _rank_main(rank: int, world: int, init: str, args: dict[str, Any], out: Any) -> None:
    import torch
    import torch.distributed as dist

    from dcpctl.bench.decode_cell import run_cell
    from dcpctl.runtime.models import load_model
    from dcpctl.runtime.parallel import ParallelState
    device = torch.device("cuda", rank) if args["device"] == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.set_num_threads(1)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", init_method=init, rank=rank,
                            world_size=world)
    try:
        dtype = getattr(torch, args["dtype"])
        consts = _ceilings(device) if device.type == "cuda" else None
        rows = []
        for c in args["dcp_sizes"]:
            ps = ParallelState.build(_groups(world, c))
            decisions = {"dcp_comm_backend": args["backend"] if c > 1 else "ag_rs",
                         "attention_path": args["path_kind"],
                         "dcp_replicate_q_proj": bool(args["replicate_q"] and c > 1), "lse_base": "e"}
            model = load_model(args["path"], ps, decisions["dcp_replicate_q_proj"], dtype, device)
            for b in args["batches"]:
                for L in args["contexts"]:
                    cell = run_cell(model, ps, decisions, b, L, args["steps"], args["warmup"], args["page"],
                                    device, args["graphs"])
                    got = [None] * world
                    dist.all_gather_object(got, cell["kv_bytes_read"])
                    row = {"dcp": c, "batch": b, "context": L, **cell, "kv_bytes_read_per_rank": got}
                    if consts is not None:
                        row.update(_predicted(row, model, args, world, consts))
                    rows.append(row)
                    if rank == 0:
                        out.put(("progress", len(rows)))
            del model
        if rank == 0:
            out.put(("rows", rows))
    finally:
        dist.destroy_process_group()


def _ceilings(device: Any) -> Any:
    from dcpctl.bench.ceilings import measure
    from dcpctl.plan.cost import Constants
    k = measure(device)
    return Constants(k.copy_bytes_per_s, k.bf16_flops_per_s, 1e11, 0.0,
                     f"measured in this run {k.calibration()}")


def _predicted(row: dict[str, Any], model: Any, args: dict[str, Any], world: int, k: Any) -> dict[str, Any]:
    from dcpctl.bench.decode_cell import predict_ms
    p = predict_ms(args["path"], model.cfg.intermediate_size, world, row["dcp"], args["backend"],
                   args["replicate_q"], row["batch"], row["context"], k, model.cfg.num_layers)
    measured = row.get("graph_ms", row["step_ms"])
    return {**p, "measured_vs_predicted": measured / p["predicted_ms"],
            "calibration": {"copy_tbps": k.hbm_bytes_per_s / 1e12, "bf16_tflops": k.flops_per_s / 1e12}}


def run(args: dict[str, Any]) -> list[dict[str, Any]]:
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn" if args["device"] == "cuda" else "fork")
    q = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [ctx.Process(target=_rank_main, args=(r, args["tp"], f"file://{tmp}/rdzv", args, q))
                 for r in range(args["tp"])]
        for p in procs:
            p.start()
        try:
            rows = _wait(q, args, procs)
        finally:
            for p in procs:
                p.join(timeout=30)
                if p.is_alive():
                    p.kill()
    return _with_ratios(rows)


def _wait(q: Any, args: dict[str, Any], procs: list[Any]) -> list[dict[str, Any]]:
    import queue

    from rich.progress import Progress

    from dcpctl import console
    deadline = time.monotonic() + args["timeout"]
    with Progress(console=console.err, transient=True) as bar:
        task = bar.add_task("decode cells", total=args["ncells"])
        while time.monotonic() < deadline:
            try:
                kind, value = q.get(timeout=2)
            except queue.Empty:
                dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                if dead:       # a rank died (its traceback is on stderr): stop waiting for it
                    raise RuntimeError(f"bench decode: a rank exited with code {dead[0]}")
                continue
            if kind == "rows":
                return value
            bar.update(task, completed=value)
    raise TimeoutError(f"bench decode: no result within --timeout {args['timeout']} s")


def _with_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    base = {(r["batch"], r["context"]): r for r in rows if r["dcp"] == 1}
    for r in rows:
        b = base.get((r["batch"], r["context"]))
        if b:
            r["time_vs_dcp1"] = r["step_ms"] / b["step_ms"]
            r["kv_bytes_vs_dcp1"] = max(r["kv_bytes_read_per_rank"]) / max(b["kv_bytes_read_per_rank"])
    return rows


@click.command()
@device_option()
@click.option("--shape", type=click.Choice(sorted(SHAPES)), default="tiny", show_default=True)
@click.option("--layers", type=click.IntRange(min=1), help="Override the shape's layer count.")
@click.option("--tp-size", "tp", type=click.IntRange(min=1), default=4, show_default=True,
              help="Ranks (one TP group); every DCP size must divide it.")
@click.option("--dcp-sizes", default="1,2,4", show_default=True)
@click.option("--batches", default="1,8", show_default=True)
@click.option("--contexts", default="1024,4096,16384", show_default=True)
@click.option("--dcp-comm-backend", "backend", type=click.Choice(["a2a", "ag_rs"]), default="a2a",
              show_default=True)
@click.option("--dcp-replicate-q-proj", "replicate_q", is_flag=True)
@click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float64"]),
              help="Compute dtype (default: bfloat16 on cuda, as served; float32 on cpu).")
@click.option("--page-size", "page", type=click.IntRange(min=1),
              help="KV page size P (default: 64 on cuda, where the paged kernel runs; 1 on cpu).")
@click.option("--cuda-graphs", "graphs", is_flag=True,
              help="Also replay each cell's decode step as a CUDA graph (cuda only; dense-MLP shapes).")
@click.option("--attention-path", "path_kind", type=click.Choice(["auto", "paged", "layout"]), default="auto",
              show_default=True, help="auto: the paged kernel path on cuda, the layout reference on cpu.")
@click.option("--steps", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--warmup", type=click.IntRange(min=0), default=2, show_default=True)
@click.option("--timeout", type=float, default=1800, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Also write the JSON rows here.")
@picture_option("step time against context per DCP size, one panel per batch (measured; predicted on CUDA)")
def command(device: str, shape: str, layers: int | None, tp: int, dcp_sizes: str, batches: str, contexts: str,
            backend: str, replicate_q: bool, dtype: str, page: int | None, graphs: bool, path_kind: str,
            steps: int, warmup: int, timeout: float, fmt: str, output: str | None,
            picture: str | None) -> None:
    """Time decode steps for DCP sizes at fixed TP over batch x context.

    For each --dcp-sizes value, --tp-size ranks run the real runtime on a synthetic checkpoint of
    --shape: every request already holds --contexts cached positions, then --steps timed decode
    steps of one token per request. Reports the forward time per step, the host layout-build time,
    the KV bytes each rank read and the ratios to DCP 1 (on CUDA also the roofline prediction).

    \b
    Examples:
      dcpctl bench decode                                     # CPU, tiny shape, tp 4, dcp 1,2,4
      dcpctl bench decode --tp-size 2 --dcp-sizes 1,2 --batches 1 --contexts 256 --steps 2
      dcpctl bench decode --device cuda --tp-size 8 --dcp-sizes 1,8 --shape v3 --cuda-graphs -o rows.json
    """
    if output:
        check_writable(Path(output))
    from dcpctl import console
    from dcpctl.plan.errors import positive_ints
    from dcpctl.plan.errors import UserError
    from dcpctl.launch.device import resolve_device
    dcps = positive_ints(dcp_sizes, "dcp-sizes")
    device = resolve_device(device, ranks_here=tp)
    if any(tp % c for c in dcps):
        raise UserError(f"every --dcp-sizes value must divide --tp-size ({tp}), got {dcps}")
    args = {"device": device, "tp": tp, "dcp_sizes": dcps, "batches": positive_ints(batches, "batches"),
            "contexts": positive_ints(contexts, "contexts"), "backend": backend, "replicate_q": replicate_q,
            "dtype": dtype or ("bfloat16" if device == "cuda" else "float32"),
            "page": page or (64 if device == "cuda" else 1), "graphs": graphs, "path_kind": path_kind,
            "steps": steps, "warmup": warmup, "timeout": timeout}
    if graphs and device != "cuda":
        raise UserError("--cuda-graphs needs --device cuda")
    args["ncells"] = len(dcps) * len(args["batches"]) * len(args["contexts"])
    _check_device(device, tp)
    overrides = dict(SHAPES[shape], **({"num_hidden_layers": layers, "first_k_dense_replace": layers}
                                       if layers else {}))
    with tempfile.TemporaryDirectory(prefix="dcpctl-bench-") as tmp:
        from dcpctl.runtime.tiny import write_tiny_model
        args["path"] = str(write_tiny_model(Path(tmp) / "model", **overrides))
        console.info(f"bench decode: shape {shape}, tp {tp}, dcp {dcps}, {args['ncells']} cells on {device}")
        rows = run(args)
    doc = {"args": {k: v for k, v in args.items() if k != "path"}, "shape": shape, "rows": rows}
    if output:
        try:
            Path(output).write_text(json.dumps(doc, indent=2))
        except OSError as e:  # the rows still reach stdout below
            console.warn(f"cannot write {output}: {e.strerror or e}")
    if picture:
        from dcpctl.plot.bench import save_decode  # matplotlib only when a picture is asked for
        save_decode(doc, picture)
    if fmt == "json":
        console.write_text(json.dumps(doc, indent=2))
        return
    cols = ["dcp", "B", "context", "step ms", "graph ms", "predicted ms", "measured/pred", "layout ms",
            "KV bytes/rank/step", "time vs dcp1", "KV vs dcp1"]
    opt = lambda r, k, f: f.format(r[k]) if k in r else "-"  # noqa: E731
    table = [[r["dcp"], r["batch"], r["context"], f"{r['step_ms']:.2f}", opt(r, "graph_ms", "{:.3f}"),
              opt(r, "predicted_ms", "{:.3f}"), opt(r, "measured_vs_predicted", "{:.2f}"),
              f"{r['layout_ms']:.2f}", f"{max(r['kv_bytes_read_per_rank']):,}",
              f"{r.get('time_vs_dcp1', 0):.2f}", f"{r.get('kv_bytes_vs_dcp1', 0):.3f}"] for r in rows]
    # CPU: no graph/prediction columns
    keep = [i for i in range(len(cols)) if any(row[i] != "-" for row in table)]
    cols, table = [cols[i] for i in keep], [[row[i] for i in keep] for row in table]
    console.out.print(console.table(f"decode step, shape {shape}, tp {tp}, {backend}", cols, table))


def check_writable(path: Path, flag: str = "-o") -> None:
    """An output flag naming a directory or an unwritable place fails before the benchmark runs, not after."""
    from dcpctl.plan.errors import UserError
    existed = path.exists()
    try:
        with path.open("a"):
            pass
        if not existed:
            path.unlink()
    except OSError as e:
        raise UserError(f"cannot write {flag} {path}: {e.strerror or e}") from None


def _check_device(device: str, tp: int) -> None:
    from dcpctl.plan.errors import UserError
    if device != "cuda":
        return
    import torch
    if not torch.cuda.is_available() or torch.cuda.device_count() < tp:
        have = torch.cuda.device_count() if torch.cuda.is_available() else 0
        raise UserError(f"--device cuda --tp-size {tp} needs {tp} CUDA GPUs, this machine has {have}")
