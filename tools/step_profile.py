"""Where the decode step's GPU time goes: every kernel of one eager decode step under torch.profiler, grouped.

Builds the checkpoint's model on one GPU, B requests with CONTEXT cached positions, and profiles REPEAT eager
decode steps (after warm-up).  Prints the kernels by total CUDA time (per step) and the sum, next to the
step's CUDA-graph replay time (DecodeGraphs, the same buffers), so the gap between kernel time and the
roofline is visible per kernel kind: GEMMs, attention, norms, rope, copies, elementwise.  JSON to -o.

usage: python3 -m tools.step_profile --model DIR [--batch 1] [--context 1000] [--blas cublaslt] [-o out.json]
"""
from __future__ import annotations

import argparse
import json


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--context", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rows", type=int, default=40)
    ap.add_argument("--blas", choices=("cublas", "cublaslt"),
                    help="torch's BLAS library (dcpctl's --blas; default cublaslt)")
    ap.add_argument("-o", "--out")
    a = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile

    from dcpctl.contract.launch_config import Decisions, RuntimeSection
    from dcpctl.runtime import settings
    if a.blas:
        settings.use(RuntimeSection(blas=a.blas))
    from dcpctl.runtime.attention.dcp import SeqChunk, build_context
    from dcpctl.runtime.engine.decode_graphs import DecodeGraphs
    from dcpctl.runtime.kv import KVPool, VirtualAllocator
    from dcpctl.runtime.models import load_model
    from dcpctl.runtime.parallel import ParallelState
    dev, page = torch.device("cuda"), 64
    ps = ParallelState.single()
    model = load_model(a.model, ps, False, torch.bfloat16, dev)
    total = a.context + 64
    alloc = VirtualAllocator(a.batch * (-(-total // page) + 1) * page, page, 1)
    for rid in range(a.batch):
        alloc.allocate(rid, total)
    pool = KVPool(model.cfg.num_layers, (alloc.num_pages + 1) * page, model.cfg.latent_dim, torch.bfloat16,
                  dev)
    pool.kv.normal_()
    ids = torch.zeros(a.batch, dtype=torch.int64, device=dev)
    chunks = [SeqChunk(r, a.context, 1) for r in range(a.batch)]

    decisions = Decisions("ag_rs", False, "e")

    def eager():
        ctx = build_context(alloc, pool, ps.dcp, decisions, chunks, model.cfg.kv_lora_rank)
        return model.logits(model.forward(ids, ctx.positions, ctx))
    for _ in range(3):
        eager()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(a.repeat):
            eager()
        torch.cuda.synchronize()
    rows = []
    for ev in prof.key_averages():
        t = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0)
        if t > 0 and ev.key and not ev.key.startswith("cuda"):
            rows.append({"kernel": ev.key[:110], "us_per_step": t / a.repeat,
                         "calls_per_step": ev.count / a.repeat})
    rows.sort(key=lambda r: -r["us_per_step"])
    kernel_us = sum(r["us_per_step"] for r in rows)
    g = DecodeGraphs(model, alloc, pool, decisions, model.cfg.kv_lora_rank, [a.batch], alloc.pages_for(total),
                     alloc.num_pages * page, logits=True)
    key = g.prepare(ids, chunks)
    graph = g.graphs[key].graph
    for _ in range(3):
        graph.replay()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    s.record()
    for _ in range(20):
        graph.replay()
    e.record()
    e.synchronize()
    replay_us = s.elapsed_time(e) / 20 * 1e3
    print(f"B={a.batch} context={a.context}: {len(rows)} kernel kinds, "
          f"{sum(r['calls_per_step'] for r in rows):.0f} launches/step, kernel time {kernel_us:.0f} us/step, "
          f"graph replay {replay_us:.0f} us")
    for r in rows[:a.rows]:
        print(f"{r['us_per_step']:8.1f} us  x{r['calls_per_step']:5.1f}  {r['kernel']}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"batch": a.batch, "context": a.context, "kernel_us": kernel_us, "replay_us": replay_us,
                       "kernels": rows}, f, indent=1)


if __name__ == "__main__":
    main()
