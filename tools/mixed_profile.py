"""Where a long prompt's steps spend the GPU while streams decode: each step from the prompt's arrival until
its first token, alone under torch.profiler, with its kind, the prompt tokens it carried, its wall time and
its kernels.

In one process on one GPU (no HTTP), the engine the server builds (tools/engine_overhead.build): STREAMS
requests decode, then one prompt of PROMPT tokens arrives; every step until the prompt's first token (and the
decode step after it) runs alone between two synchronizations under the profiler, so a step's wall time is its
whole cost and its kernels are its own.  Run it with and without --disable-mixed-chunk to compare mixed steps
with prefill first (docs/benchmarks.md, the streams + 16K arrivals cell).  JSON to -o.

usage: python3 -m tools.mixed_profile --model DIR [--streams 8] [--prompt 16384] [--chunk 8192]
       [--stream-prompt 1000] [--stream-tokens 256] [--disable-mixed-chunk] [--top 8] [--device cuda]
       [-o out.json]
"""
from __future__ import annotations

import argparse
import json
import time

from tools.engine_overhead import build, prompt

LONG = 10**6     # the arriving prompt's request id


def profiled_step(engine, top: int) -> dict:
    """One engine step alone: its kind, chunks, prompt tokens, wall ms and (on CUDA) its kernels by name."""
    import torch
    from benchmarks.prefill_ttft import kernel_totals
    cuda = engine.device.type == "cuda"
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    if cuda:
        torch.cuda.synchronize()
    with torch.profiler.profile(activities=acts) as prof:
        t0 = time.perf_counter()
        engine.step()
        if cuda:
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    kind, chunks = engine.last_step
    kernels = kernel_totals(prof.events(), 60) if cuda else []
    return {"kind": kind, "chunks": len(chunks), "tokens": sum(ch.num_tokens for ch in chunks),
            "prompt_tokens": sum(ch.num_tokens for ch in chunks if ch.rid == LONG), "wall_ms": wall * 1e3,
            "kernel_ms": sum(k[1] for k in kernels),
            "kernels": [[n, round(ms, 3), c] for n, ms, c in kernels[:top]]}


def run(a: argparse.Namespace) -> dict:
    from dcpctl.runtime.engine.request import SamplingParams
    schedule = {"mixed_chunk": False} if a.disable_mixed_chunk else None
    engine = build(a.model, a.capacity, True, max(8, a.streams + 1), a.device, a.page_size, a.chunk, schedule)
    for i in range(a.streams):
        engine.submit(i, prompt(a.stream_prompt, i),
                      SamplingParams(max_new_tokens=a.stream_tokens, ignore_eos=True))
    while any(s.prefilling for s in engine.sched.running) or engine.sched.waiting:
        engine.step()
    for _ in range(8):
        engine.step()
    engine.submit(LONG, prompt(a.prompt, 99), SamplingParams(max_new_tokens=2, ignore_eos=True))
    steps = []
    while True:
        steps.append(profiled_step(engine, a.top))
        long = next((s for s in engine.sched.running if s.rid == LONG), None)
        if long is None or len(long.output) >= 1:
            break
    steps.append(profiled_step(engine, a.top))    # the decode step after: what the prompt left queued
    return {"model": a.model, "device": a.device, "streams": a.streams, "prompt": a.prompt, "chunk": a.chunk,
            "mixed_chunk": not a.disable_mixed_chunk, "steps": steps,
            "total_wall_ms": sum(s["wall_ms"] for s in steps)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--streams", type=int, default=8, help="requests decoding when the prompt arrives")
    ap.add_argument("--stream-prompt", type=int, default=1000, help="their prompt tokens")
    ap.add_argument("--stream-tokens", type=int, default=256,
                    help="their max_tokens (they must outlast the prompt)")
    ap.add_argument("--prompt", type=int, default=16384, help="the arriving prompt's tokens")
    ap.add_argument("--chunk", type=int, default=8192, help="--chunked-prefill-size")
    ap.add_argument("--disable-mixed-chunk", action="store_true", help="prefill first (the server flag)")
    ap.add_argument("--capacity", type=int, default=140000)
    ap.add_argument("--page-size", type=int, default=64)
    ap.add_argument("--top", type=int, default=8, help="kernels listed per step")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke run (no kernels)")
    ap.add_argument("-o", "--out")
    a = ap.parse_args(argv)
    res = run(a)
    for s in res["steps"]:
        print(f"{s['kind']:16s} chunks {s['chunks']:3d} prompt {s['prompt_tokens']:6d} wall "
              f"{s['wall_ms']:8.2f} ms kernels {s['kernel_ms']:8.2f} ms")
        for name, ms, calls in s["kernels"]:
            print(f"    {ms:8.3f} ms {calls:5d}  {name}")
    print(f"total {res['total_wall_ms']:.1f} ms over {len(res['steps'])} steps")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
