"""Host time per call of the per-layer decode ops, eagerly, on one GPU: where an uncaptured step spends
its launch time (the CUDA-graph path does not pay it).

For each op: host µs per call (the least mean over 5 runs of 100 back-to-back calls, no sync inside) and the
eager wall µs of one call timed alone with CUDA events after a sync (what `dcpctl bench exchange` reports as
its eager column).  With two GPUs (--a2a) the NCCL all_to_all_single and the in-place exchange are added,
through torch.multiprocessing with one rank per GPU.

usage: python3 -m tools.host_overhead [--a2a] [--profile] [-o out.json]
"""
from __future__ import annotations

import argparse
import inspect
import json
import sys
import tempfile
import time
from typing import Callable


def host_us(fn: Callable[[], object], n: int = 100, batches: int = 5) -> float:
    """Least mean host time per call over `batches` runs of n back-to-back calls (the machine's own
    noise, other processes and clock ramps, only ever adds time)."""
    import torch
    for _ in range(5):
        fn()
    best = float("inf")
    for _ in range(batches):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n * 1e6)
    torch.cuda.synchronize()
    return best


def top_functions(fn: Callable[[], object], n: int = 100, lines: int = 18) -> str:
    """cProfile of n calls: the functions with the most cumulative host time."""
    import cProfile
    import io
    import pstats
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(n):
        fn()
    pr.disable()
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("cumulative").print_stats(lines)
    return buf.getvalue()


def alone_us(fn: Callable[[], object]) -> float:
    from dcpctl.bench.ceilings import events_ms
    return events_ms(fn, reps=50, warmup=3) * 1e3


def one_gpu_ops(b: int = 8, heads: int = 128, ctx: int = 8192) -> dict[str, Callable[[], object]]:
    import torch

    from dcpctl.runtime.attention.fused_merge import merge_a2a, rescale_partial
    from dcpctl.runtime.attention.triton_mla import KernelConfig, default_config, mla_decode
    dev = torch.device("cuda")
    c, v, r, page = 2, 512, 576, 64
    recv = torch.randn(c, b, heads // c, v + 2, device=dev, dtype=torch.bfloat16)
    o_parts, lse_parts = recv[..., :v], recv.view(torch.float32)[..., v // 2]
    pool = torch.randn(b * ctx // page + 1, page, r, device=dev, dtype=torch.bfloat16)
    bt = torch.arange(b * ctx // page, device=dev, dtype=torch.int32).view(b, -1)
    lens = torch.full((b,), ctx, device=dev, dtype=torch.int32)
    rows = torch.arange(b, device=dev, dtype=torch.int32)
    qpos = torch.full((b,), ctx - 1, device=dev, dtype=torch.int32)
    q = torch.randn(b, heads, r, device=dev, dtype=torch.bfloat16)
    o = torch.randn(b, heads, v, device=dev, dtype=torch.float32)
    lse = torch.randn(b, heads, device=dev)
    x = torch.empty(1, device=dev)
    tri = default_config(heads)._replace(gluon=False)
    kw = dict(scale=0.1, v_dim=v, max_local_len=ctx)
    if "descriptors" in inspect.signature(mla_decode).parameters:   # as the runtime passes KVPool.descriptors
        kw["descriptors"] = {}
    return {
        "torch.empty_like (no kernel)": lambda: torch.empty_like(recv),
        "torch add_ (one tiny kernel)": lambda: x.add_(1),
        "merge_a2a (Triton merge of c partials)": lambda: merge_a2a(o_parts, lse_parts, "e", torch.bfloat16),
        "rescale_partial (ag_rs correction)": lambda: rescale_partial(o, lse, lse, "e"),
        f"mla_decode default ({default_config(heads)[:4]}, gluon={default_config(heads).gluon})":
            lambda: mla_decode(q, pool, bt, lens, rows, qpos, **kw),
        f"mla_decode Triton {tri[:4]}": lambda: mla_decode(q, pool, bt, lens, rows, qpos,
                                                            config=tri, **kw),
        "mla_decode one split (no merge)": lambda: mla_decode(q, pool, bt, lens, rows, qpos,
                                                              num_splits=1, **kw),
        "KernelConfig() (python only)": lambda: KernelConfig(),
    }


def _a2a_rank(rank: int, world: int, init: str, b: int, out, profile: bool) -> None:
    import torch
    import torch.distributed as dist

    from dcpctl.bench.decode import _groups
    from dcpctl.runtime.attention.comm import exchange_packed, pack_by_owner
    from dcpctl.runtime.attention.fused_merge import merge_a2a
    from dcpctl.runtime.parallel import ParallelState
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=init, rank=rank, world_size=world)
    try:
        axis = ParallelState.build(_groups(world, world)).dcp
        heads, v = 128, 512
        o = torch.randn(b, heads, v, device="cuda", dtype=torch.bfloat16)
        lse = torch.randn(b, heads, device="cuda")
        send = pack_by_owner(o, lse, torch.bfloat16, world)
        raw_in = send.view(torch.uint8).view(-1)
        raw_out = torch.empty_like(raw_in)
        ops = {
            "all_to_all_single (raw bytes)": lambda: dist.all_to_all_single(raw_out, raw_in,
                                                                            group=axis.group),
            "exchange_packed in place (a2a + merge)":
                lambda: exchange_packed(send, "e", axis, torch.bfloat16, v, merge_a2a, torch.bfloat16),
            "exchange_packed, torch merge": lambda: exchange_packed(send, "e", axis, torch.bfloat16, v, None,
                                                                    torch.bfloat16),
        }
        res = {k: {"host_us": host_us(f), "alone_us": alone_us(f)} for k, f in ops.items()}
        prof = top_functions(ops["exchange_packed in place (a2a + merge)"]) if profile else ""
        if rank == 0 and profile:
            print("cProfile, 100 in-place exchanges (rank 0):\n" + prof, flush=True)
        if rank == 0:
            out.put(res)
    finally:
        dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a2a", action="store_true", help="also the two-GPU exchange (needs 2 GPUs)")
    ap.add_argument("--profile", action="store_true", help="also print cProfile's top functions per op")
    ap.add_argument("-o", "--out", default=None)
    args = ap.parse_args()
    import torch
    import triton
    res = {"torch": torch.__version__, "triton": triton.__version__, "device": torch.cuda.get_device_name(),
           "ops": {}}
    for name, fn in one_gpu_ops().items():
        res["ops"][name] = {"host_us": host_us(fn), "alone_us": alone_us(fn)}
        print(f"{name:70s} host {res['ops'][name]['host_us']:8.1f} us   alone "
              f"{res['ops'][name]['alone_us']:8.1f} us",
              flush=True)
    ops = one_gpu_ops() if args.profile else {}
    for name in ops:
        if name.startswith("mla_decode default") or name.startswith("mla_decode Triton"):
            print(f"cProfile, 100 calls of {name}:\n" + top_functions(ops[name], lines=30), flush=True)
    if args.a2a:
        import torch.multiprocessing as mp
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        with tempfile.TemporaryDirectory() as tmp:
            procs = [ctx.Process(target=_a2a_rank, args=(r, 2, f"file://{tmp}/rdzv", 8, q, args.profile))
                     for r in range(2)]
            for p in procs:
                p.start()
            a2a = q.get(timeout=300)
            for p in procs:
                p.join(timeout=30)
        for name, v in a2a.items():
            res["ops"][name] = v
            print(f"{name:70s} host {v['host_us']:8.1f} us   alone {v['alone_us']:8.1f} us", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
