"""Profile one cell of the local MLA decode kernel under Nsight Compute (stall reasons, throughputs).

    ncu --kernel-name regex:_mla --launch-skip 3 --launch-count 1 --section SpeedOfLight \
        --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
        python3 -m tools.profile_mla --heads 128 --ctx 32768 --batch 64 --config 64,64,8,2,1,0,0,0,1

Runs the kernel 5 times on random bf16 pages (the bench's pool and block tables, no CUDA graph so
that each launch is a kernel ncu can see) and prints the time per launch without the profiler.
"""
from __future__ import annotations

import argparse
import time

import torch

from dcpctl.bench.kernel import Pool, R, _decode_fn
from dcpctl.runtime.attention.triton_mla import KernelConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heads", type=int, default=128)
    ap.add_argument("--ctx", type=int, default=32768)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--config", default="64,64,8,2,1,0,0,0,1",
                    help="block_h,block_n,warps,stages,occupancy,tma,lazy,ws,gluon")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    cfg = KernelConfig(*[int(x) for x in a.config.split(",")])
    pool = Pool(a.batch * a.ctx, torch.device("cuda"))
    q = torch.randn(a.batch, a.heads, R, device="cuda", dtype=torch.bfloat16)
    fn = _decode_fn(q, pool, pool.tables(a.batch, a.ctx)[0], a.ctx, cfg)
    for _ in range(a.reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        print(f"{cfg} heads {a.heads} ctx {a.ctx} batch {a.batch}: {(time.perf_counter() - t) * 1e6:.1f} us")


if __name__ == "__main__":
    main()
