"""`dcpctl bench exchange`: the packed a2a DCP exchange against a raw NCCL all_to_all_single.

Per batch size B, with Hk kernel heads and v_dim latent columns in bf16, three ways, each timed
eagerly (CUDA events) and as 10 calls captured in one CUDA graph (needs one GPU per DCP rank):

- packed:   pack o and the fp32 LSE into 16-bit lanes (copies), one all_to_all_single over byte
            views, fused merge of the received partials (the path for an o computed elsewhere);
- in place: what the decode step runs: the attention kernel has already written o and the LSE lanes
            into the send buffer (comm.send_buffer), so the exchange is the all_to_all_single and
            the fused merge reading the received lanes in place;
- raw:      a bare all_to_all_single of the same number of bytes.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import click


def _rank(rank: int, world: int, init: str, args: dict[str, Any], out: Any) -> None:
    import torch
    import torch.distributed as dist

    from dcpctl.bench.ceilings import events_ms, graph_ms
    from dcpctl.bench.decode import _groups
    from dcpctl.runtime.attention.comm import exchange_a2a, exchange_packed, pack_by_owner
    from dcpctl.runtime.attention.fused_merge import merge_a2a
    from dcpctl.runtime.parallel import ParallelState
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=init, rank=rank, world_size=world)
    try:
        axis = ParallelState.build(_groups(world, world)).dcp
        rows = []
        for b in args["batches"]:
            o = torch.randn(b, args["heads"], args["v_dim"], device="cuda", dtype=torch.bfloat16)
            lse = torch.randn(b, args["heads"], device="cuda", dtype=torch.float32)
            raw_in = torch.empty((args["v_dim"] + 2) * b * args["heads"] * 2, dtype=torch.uint8,
                                 device="cuda")
            raw_out = torch.empty_like(raw_in)

            send = pack_by_owner(o, lse, torch.bfloat16, axis.size)      # as the kernel leaves it

            def packed() -> None:
                exchange_a2a(o, lse, "e", axis, torch.bfloat16, merge=merge_a2a, out_dtype=torch.bfloat16)

            def in_place() -> None:
                exchange_packed(send, "e", axis, torch.bfloat16, args["v_dim"], merge_a2a, torch.bfloat16)

            def raw() -> None:
                dist.all_to_all_single(raw_out, raw_in, group=axis.group)
            row = {"batch": b, "bytes_per_rank": raw_in.numel(),
                   "packed_us": events_ms(packed, reps=50) * 1e3, "raw_us": events_ms(raw, reps=50) * 1e3,
                   "inplace_us": events_ms(in_place, reps=50) * 1e3,
                   "packed_graph_us": graph_ms([packed] * 10) * 1e3,
                   "raw_graph_us": graph_ms([raw] * 10) * 1e3,
                   "inplace_graph_us": graph_ms([in_place] * 10) * 1e3}
            for k in ("packed", "inplace"):
                row[f"{k}_vs_raw"] = row[f"{k}_us"] / row["raw_us"]
                row[f"{k}_vs_raw_graph"] = row[f"{k}_graph_us"] / row["raw_graph_us"]
            rows.append(row)
        if rank == 0:
            out.put(rows)
    finally:
        dist.destroy_process_group()


@click.command()
@click.option("--dcp-size", "dcp", type=click.IntRange(min=2), default=2, show_default=True,
              help="Ranks of the DCP group (one GPU each).")
@click.option("--kernel-heads", "heads", type=click.IntRange(min=1), default=128, show_default=True)
@click.option("--v-dim", type=click.IntRange(min=1), default=512, show_default=True, help="kv_lora_rank.")
@click.option("--batches", default="1,8,32,64", show_default=True)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--save-calibration", type=click.Path(dir_okay=False), default=None,
              help="Fit a2a_latency_us, a2a_gbps (the in-place exchange), coll_latency_us and link_gbps (raw "
                   "all_to_all_single) into this calibration file (other keys kept).")
def command(dcp: int, heads: int, v_dim: int, batches: str, fmt: str, save_calibration: str | None) -> None:
    """Time the packed a2a exchange against a raw all_to_all_single of the same bytes (CUDA, >= 2 GPUs).

    \b
    Example:
      dcpctl bench exchange --dcp-size 2 --kernel-heads 128 --batches 1,8,32,64
    """
    import torch
    import torch.multiprocessing as mp

    from dcpctl.plan.errors import positive_ints
    from dcpctl.plan.errors import UserError
    if not torch.cuda.is_available() or torch.cuda.device_count() < dcp:
        raise UserError(f"bench exchange needs {dcp} CUDA GPUs (one per DCP rank); this machine has "
                        f"{torch.cuda.device_count() if torch.cuda.is_available() else 0}")
    if heads % dcp:
        raise UserError(f"--kernel-heads ({heads}) must be a multiple of --dcp-size ({dcp})")
    args = {"batches": positive_ints(batches, "batches"), "heads": heads, "v_dim": v_dim}
    if save_calibration:
        from dcpctl.bench.decode import check_writable
        check_writable(Path(save_calibration), "--save-calibration")
        if len(set(args["batches"])) < 2:
            raise UserError("--save-calibration fits a latency and a bandwidth: give --batches with two or "
                            f"more sizes (got {batches})")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [ctx.Process(target=_rank, args=(r, dcp, f"file://{tmp}/rdzv", args, q)) for r in range(dcp)]
        for p in procs:
            p.start()
        try:
            rows = q.get(timeout=600)
        finally:
            for p in procs:
                p.join(timeout=30)
    doc = {"dcp": dcp, "kernel_heads": heads, "v_dim": v_dim, "rows": rows}
    _output(doc, fmt)
    if save_calibration:   # after the results are out
        from dcpctl.plan.calibrate import fit_exchange, merge_calibration
        merge_calibration(Path(save_calibration), fit_exchange(doc), {"exchange": "dcpctl bench exchange"})


def _output(doc: dict[str, Any], fmt: str) -> None:
    from dcpctl import console
    if fmt == "json":
        console.write_text(json.dumps(doc, indent=2))
        return
    rows, dcp, heads = doc["rows"], doc["dcp"], doc["kernel_heads"]
    cols = ["B", "bytes/rank", "raw us", "packed us", "in place us", "graph raw us", "graph packed us",
            "graph in place us", "graph packed/raw", "graph in place/raw"]
    table = [[r["batch"], f"{r['bytes_per_rank']:,}"] + [f"{r[k]:.1f}" for k in (
        "raw_us", "packed_us", "inplace_us", "raw_graph_us", "packed_graph_us", "inplace_graph_us")]
        + [f"{r['packed_vs_raw_graph']:.2f}", f"{r['inplace_vs_raw_graph']:.2f}"] for r in rows]
    console.out.print(console.table(f"packed a2a vs all_to_all_single, dcp {dcp}, {heads} kernel heads", cols,
                                    table))
