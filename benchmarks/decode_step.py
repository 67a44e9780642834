"""`bench decode`'s cell (dcpctl.bench.decode_cell.run_cell) on a checkpoint directory, one device, DCP 1.

    python3 -m benchmarks.decode_step DIR [--device cuda] [--batches 1,8,32] [--contexts 1032] [--cuda-graphs]
        [-o rows.json]
        [--profile B]   (CUDA: one eager step at batch B and the first context under torch.profiler: GPU time
                        per kernel)

For checkpoints `bench decode` cannot write (it makes every layer dense): the 16-layer MoE checkpoint of
serve_peers.py. Same rows as `bench decode -o` (step_ms eager, graph_ms = one CUDA-graph replay's GPU
time, graph_error when the capture failed), without the roofline prediction (the planner has no MoE cost).
"""
from __future__ import annotations

import argparse
import json

import torch


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32", "float64"])
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--contexts", default="1032")
    ap.add_argument("--page-size", type=int, help="default: 64 on cuda, 1 on cpu (as bench decode)")
    ap.add_argument("--cuda-graphs", action="store_true")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("-o", "--output")
    ap.add_argument("--profile", type=int, metavar="B", help="profile one eager step at batch B (CUDA)")
    args = ap.parse_args(argv)
    from benchmarks.hf_peer import save
    from dcpctl.bench.decode_cell import run_cell
    from dcpctl.runtime.models import load_model
    from dcpctl.runtime.parallel import ParallelState
    device = torch.device(args.device)
    if args.cuda_graphs and device.type != "cuda":
        ap.error("--cuda-graphs needs --device cuda")
    ps = ParallelState.single()
    decisions = {"dcp_comm_backend": "ag_rs", "attention_path": "auto", "dcp_replicate_q_proj": False,
                 "lse_base": "e"}
    model = load_model(args.model, ps, False, getattr(torch, args.dtype), device)
    page = args.page_size or (64 if device.type == "cuda" else 1)
    rows = []
    for b in (int(x) for x in args.batches.split(",")):
        for L in (int(x) for x in args.contexts.split(",")):
            try:
                cell = run_cell(model, ps, decisions, b, L, args.steps, args.warmup, page, device,
                                args.cuda_graphs)
            except Exception as e:  # noqa: BLE001 - one cell's failure (often OOM) is a result too
                cell = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            rows.append({"dcp": 1, "batch": b, "context": L, **cell})
    doc = {"model": args.model, "device": args.device, "rows": rows}
    if args.profile and device.type == "cuda":
        L = int(args.contexts.split(",")[0])
        doc["profile"] = {"batch": args.profile, "context": L, **profile_step(
            lambda: run_cell(model, ps, decisions, args.profile, L, 1, 0, page, device, False))}
    save(doc, args.output)
    print(json.dumps(doc, indent=2))


def profile_step(fn, top: int = 30) -> dict:
    """One call of fn (run_cell's layout and one eager step) under torch.profiler: GPU time per kernel name
    (ms, calls), largest first, and every kernel in launch order (name, us) to tell the GEMMs of one name
    apart."""
    from torch.profiler import ProfilerActivity, profile
    from benchmarks.prefill_ttft import kernel_totals
    fn()                                   # the cell's first call: allocation and any compile, outside the
                                           # profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = [ev for ev in prof.events() if ev.device_type == torch.autograd.DeviceType.CUDA]
    order = sorted((ev.time_range.start, ev.name[:60], round(ev.device_time, 1)) for ev in events)
    return {"by_name": [{"name": k, "ms": round(ms, 4), "calls": n}
                        for k, ms, n in kernel_totals(events, 110)[:top]],
            "in_order": [[name, us] for _, name, us in order]}


if __name__ == "__main__":
    main()
