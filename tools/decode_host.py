"""Host time of a graph decode step's per-row phases at N decoding rows, on the CPU: the Python that a served
step spends outside the GPU and that grows with the batch (no GPU needed).

Builds the serving engine on the built-in tiny model's shape (1 layer) with decode graphs on, which off CUDA
replay the captured step eagerly on the same buffers through the same host code (engine/decode_graphs.py),
submits N requests of staggered prompt lengths (so requests cross page boundaries on different steps, as
served traffic does), steps until all decode, then times STEPS steps: each phase's median host microseconds a
call, the model's own time (`DecodeGraphs._run`) left out.  Compare runs on one machine only.

usage: python3 -m tools.decode_host [--rows 32] [--steps 200] [--page-size 64]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

PHASES = [  # (module, class or None, attribute): the per-row host work of one graph decode step
    ("dcpctl.runtime.engine.engine", "Engine", "step"),
    ("dcpctl.runtime.engine.scheduler", "Scheduler", "next_batch"),
    ("dcpctl.runtime.engine.scheduler", "Scheduler", "_make_room"),
    ("dcpctl.runtime.engine.decode_graphs", "DecodeGraphs", "prepare"),
    ("dcpctl.runtime.attention.block_table", "DeviceBlockTable", "update"),
    ("dcpctl.runtime.engine.pipeline", None, "launch_sampling"),
    ("dcpctl.runtime.engine.pipeline", None, "resolve"),
    ("dcpctl.runtime.engine.pipeline", "Pipeline", "sources"),
    ("dcpctl.runtime.engine.model_runner", None, "token_ids"),
    ("dcpctl.runtime.engine.batch", None, "sample_rows"),
    ("dcpctl.runtime.engine.scheduler", "Scheduler", "advance"),
    ("dcpctl.runtime.engine.model_runner", None, "kv_rows"),
]


def build_engine(rows: int, page: int, work: Path):
    from dcpctl.runtime.tiny import write_tiny_model
    from tools.engine_overhead import build
    path = str(write_tiny_model(work / "m", num_hidden_layers=1, first_k_dense_replace=1))
    return build(path, rows * 2048, True, rows, "cpu", page,
                 cuda_graph={"batch_sizes": sorted({1, 8, rows}), "reason": "tools/decode_host.py"})


def timed(store: dict[str, list[float]], label: str, fn):
    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            store[label].append(time.perf_counter() - t)
    return wrapper


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=32, help="decoding requests (the graph batch)")
    ap.add_argument("--steps", type=int, default=200, help="steps timed")
    ap.add_argument("--page-size", type=int, default=64)
    args = ap.parse_args(argv)
    import importlib
    import torch
    from dcpctl.runtime.engine.request import SamplingParams
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        eng = build_engine(args.rows, args.page_size, Path(tmp))
        for i in range(args.rows):   # staggered lengths: page crossings spread over the steps
            prompt = [1 + j % 50 for j in range(100 + 37 * i)]
            eng.submit(i, prompt,
                       SamplingParams.from_dict({"max_new_tokens": args.steps + 100, "ignore_eos": True}))
        while not eng.last_step[0].startswith("graph"):
            eng.step()
        store: dict[str, list[float]] = defaultdict(list)
        for mod, cls, attr in PHASES + [("dcpctl.runtime.engine.decode_graphs", "DecodeGraphs", "_run")]:
            owner = getattr(importlib.import_module(mod), cls) if cls else importlib.import_module(mod)
            setattr(owner, attr, timed(store, attr if attr != "_run" else "model", getattr(owner, attr)))
        for _ in range(args.steps):
            eng.step()
    kind, chunks = eng.last_step
    if len(store["model"]) == len(store["step"]):   # one replay a step: the step's host time is step - model
        store["step"] = [a - b for a, b in zip(store["step"], store["model"])]
    print(f"{args.rows} rows, last step {kind} of {len(chunks)} chunks; median us a call over {args.steps} "
          "steps (step: its host time, the model's left out):")
    for _, _, attr in PHASES:
        v = store[attr]
        print(f"  {attr:18s} {statistics.median(v) * 1e6:8.1f}   calls a step {len(v) / args.steps:.2f}")


if __name__ == "__main__":
    main()
