"""Where a served decode step spends its time outside the GPU, and what the first request after warm-up
compiles.

In one process on one GPU (no HTTP): builds the Engine the server builds (graphs on, warm-up with prompts),
then (1) times the first B=1 request (prompt PROMPT tokens, 1 output token) under cProfile and a second one
plainly, printing the top functions of the first; then one request each of four lengths no request had yet (n
- 1, n + 1, n - 63, n + 250); (2) runs B requests of PROMPT tokens x STEPS output tokens and, per decode step,
records the wall time of engine.step() and the GPU time of its graph replay (CUDA events around the replay):
host overhead = wall - GPU; and the host time of engine.step's phases (the metadata, the cudaGraphLaunch call,
the sampling launches, the previous step's resolve: a phase that waits shows it).  JSON to -o.

usage: python3 -m tools.engine_overhead --model DIR [--batches 1,8,32] [--prompt 1000]
       [--steps 64] [--capacity 140000] [--disable-cuda-graph] [--page-size 64] [-o out.json]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import time


def build(model_path: str, capacity: int, graphs: bool, max_running: int, device: str = "cuda",
          page: int = 64, chunk: int = 8192, schedule: dict | None = None, cuda_graph: dict | None = None):
    """The serving engine on one device, warmed up (schedule / cuda_graph: the launch config's sections, else
    defaults; off CUDA a cuda_graph section with batch sizes replays the step eagerly through the graph
    path)."""
    import torch
    from dcpctl.contract.launch_config import LaunchConfig
    from dcpctl.launch.cuda_graphs import cuda_graph_section
    from dcpctl.runtime.engine import Engine
    from dcpctl.runtime.models import load_model
    from dcpctl.runtime.parallel import ParallelState
    ps = ParallelState.single()
    dtype = "bfloat16" if device == "cuda" else "float32"
    cfg = {"version": 1, "model": {"path": model_path, "dtype": dtype}, "device": device, "world_size": 1,
           "dist_backend": "nccl" if device == "cuda" else "gloo",
           "topology": {"tp_size": 1, "attn_tp_size": 1, "attn_dp_size": 1, "dcp_size": 1, "ep_size": 1,
                        "pp_size": 1},
           "groups": {k: [[0]] for k in ("tp", "attn_tp", "attn_dp", "dcp", "ep")},
           "decisions": {"dcp_comm_backend": "ag_rs", "dcp_replicate_q_proj": False, "lse_base": "e"},
           "kv": {"page_size": page, "capacity_tokens": capacity, "chunked_prefill_size": chunk,
                  "max_running_requests": max_running},
           "cuda_graph": cuda_graph or cuda_graph_section(device, not graphs, None, None, max_running)}
    if schedule is not None:
        cfg["schedule"] = schedule
    model = load_model(model_path, ps, False, getattr(torch, dtype), torch.device(device))
    engine = Engine(model, ps, LaunchConfig.from_dict(cfg))
    engine.warm_up(prompts=True)
    return engine


def prompt(n: int, i: int) -> list[int]:
    return [1 + (i * 7 + j) % 250 for j in range(n)]


def first_requests(engine, n: int) -> dict:
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    engine.generate([{"prompt_ids": prompt(n, 100), "max_new_tokens": 1}])
    prof.disable()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    engine.generate([{"prompt_ids": prompt(n, 101), "max_new_tokens": 1}])
    second = time.perf_counter() - t0
    others = {}
    for m in sorted({max(1, m) for m in (n - 1, n + 1, n - 63, n + 250)}):   # lengths no request had yet
        t0 = time.perf_counter()
        engine.generate([{"prompt_ids": prompt(m, 102), "max_new_tokens": 1}])
        others[m] = (time.perf_counter() - t0) * 1e3
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(30)
    return {"first_ms": first * 1e3, "second_ms": second * 1e3, "new_lengths_ms": others,
            "profile": s.getvalue()}


def decode_steps(engine, batch: int, n: int, steps: int) -> dict:
    import torch
    from dcpctl.runtime.engine.request import SamplingParams
    for i in range(batch):
        engine.submit(1000 + i, prompt(n, i), SamplingParams(max_new_tokens=steps, ignore_eos=True))
    gpu, wall = [], []
    g = engine.runner.graphs
    if g is not None:
        run = g.replay

        def timed(*a):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            out = run(*a)
            e.record()
            gpu.append((s, e))
            return out
        g.replay = timed
    from dcpctl.runtime.engine.phases import PHASES, PhaseTimers
    timers = PhaseTimers(engine.runner)
    while engine.sched.has_work():
        decoding = not any(s.prefilling for s in engine.sched.running) and not engine.sched.waiting
        if decoding:
            timers.start()
        t0 = time.perf_counter()
        engine.step()
        if decoding:
            wall.append(time.perf_counter() - t0)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    timers.undo()
    if g is not None:
        del g.replay
    gpu_ms = [s.elapsed_time(e) for s, e in gpu[-len(wall):]] if gpu else []
    out = {"batch": batch, "steps": len(wall), "step_wall_ms_p50": statistics.median(wall) * 1e3}
    if timers.rows:
        out["host_ms_p50"] = {k: round(statistics.median(r[i] for r in timers.rows) * 1e3, 4)
                              for i, k in enumerate(PHASES)}
    if gpu_ms:
        out["replay_gpu_ms_p50"] = statistics.median(gpu_ms)
        out["host_overhead_ms_p50"] = out["step_wall_ms_p50"] - out["replay_gpu_ms_p50"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--prompt", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--capacity", type=int, default=140000)
    ap.add_argument("--disable-cuda-graph", action="store_true")
    ap.add_argument("--page-size", type=int, default=64, help="KV page size (launch's default on CUDA is 1)")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke run (eager steps, no GPU timing)")
    ap.add_argument("-o", "--out")
    a = ap.parse_args()
    batches = [int(b) for b in a.batches.split(",")]
    engine = build(a.model, a.capacity, not a.disable_cuda_graph, max(batches), a.device, a.page_size)
    res = {"first": first_requests(engine, a.prompt), "decode": [decode_steps(engine, b, a.prompt, a.steps)
                                                                 for b in batches]}
    print(res["first"]["profile"])
    res["first"].pop("profile") if not a.out else None
    print(json.dumps({k: v for k, v in res.items() if k != "first"}
                     | {"first_ms": res["first"]["first_ms"], "second_ms": res["first"]["second_ms"],
                        "new_lengths_ms": res["first"]["new_lengths_ms"]}, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
