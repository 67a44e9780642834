"""Time one MoE layer's forward (router, routed experts, shared expert) at decode batch sizes.

A DeepSeek-V3-like routing shape scaled down (64 routed experts, top-8 of 8 groups / 4 kept, hidden
1024, expert width 256; random weights, `write_tiny_model`), loaded by the runtime on one rank, so all
64 experts are local: the worst case for dispatch overhead.  Prints ms per call per batch size.
Run it against another tree's runtime with PYTHONPATH=<that tree> to compare dispatch strategies.

usage: PYTHONPATH=. python3 benchmarks/moe_dispatch.py [--device cuda] [--dtype bfloat16]
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--batches", default="1,8,32,64")
    args = ap.parse_args()
    from dcpctl.runtime.boot import DTYPES
    from dcpctl.runtime.models import load_model
    from dcpctl.runtime.parallel import ParallelState
    from dcpctl.runtime.tiny import write_tiny_model
    dev = torch.device(args.device)
    with tempfile.TemporaryDirectory() as d:
        write_tiny_model(d, hidden_size=1024, moe_intermediate_size=256, n_routed_experts=64, num_experts_per_tok=8,
                         n_group=8, topk_group=4, num_hidden_layers=2, first_k_dense_replace=1)
        model = load_model(d, ParallelState.single(), False, DTYPES[args.dtype], dev)
    moe = model.layers[1].mlp
    rows = {}
    for b in [int(x) for x in args.batches.split(",")]:
        x = torch.randn(b, 1024, device=dev, dtype=DTYPES[args.dtype])
        for _ in range(3):
            moe(x)
        best = float("inf")
        for _ in range(5):
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(20):
                moe(x)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            best = min(best, (time.perf_counter() - t) / 20 * 1e3)
        rows[b] = best
        print(f"B={b:3d}  {best:.3f} ms per MoE layer", flush=True)
    print(json.dumps({"device": str(dev), "dtype": args.dtype, "ms_per_layer": rows}))


if __name__ == "__main__":
    main()
