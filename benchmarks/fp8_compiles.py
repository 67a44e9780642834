"""How many Triton kernels a block-FP8 server compiles at start: counted on the CPU with Triton's own keys.

    python -m benchmarks.fp8_compiles [--max-bs 64] [--chunk 8192] [--json OUT]
                                      [--compile serial,processes:2,...]

A first start of `dcpctl launch` on a block-FP8 checkpoint compiles one Triton kernel per distinct
specialization its FP8 GEMMs launch (fp8_gemm.py's MMA kernel, fp8_gemv.py's few-rows kernel, fp8_dequant.py):
the constexprs of the tile setting choose_tiles picks, num_warps/num_stages, and per integer argument whether
it is 1 or a multiple of 16 (pointers: 16-byte aligned or not). The decode step is captured at every
CUDA-graph batch size (SGLang's buckets up to --max-bs) and the warm-up prefills a ladder of prompt lengths
(engine/warm_up.py, up to --chunk), so each GEMM of DeepSeek-V3's shapes (TP 1, the 16 routed experts of
fp8_model_check.write_checkpoint, top-8) meets those row counts. Here every such call runs through
fp8_gemm.fp8_matmul on the CPU under a stand-in CUDA driver (sm_90, 132 SMs): Triton binds the arguments and
computes its cache key exactly as on the GPU, and the compile is skipped (recorded instead), so the count is
the number of kernels a first start compiles and a later start finds in Triton's on-disk cache
(~/.triton/cache, or $TRITON_CACHE_DIR). The bf16 path's own Triton kernels (norms, rope, gemm16, attention)
are not counted.

--compile: then compile them for sm_90 on this CPU (Triton's own ptxas; no GPU), each way listed into a fresh
Triton cache of its own, timed from the first compile to the last kernel in memory: `serial` (one after the
other, as a server's warm-up meets them),
`threads:N` (what a server does, runtime/models/fp8_precompile.py: Triton's AsyncCompileMode over N threads),
`processes:N` (N spawned processes compile a share each into the cache, then this process loads them from it;
their start-up included). CPU-only figures: a GPU host has more cores.
"""
from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch
import triton
from triton.runtime import driver

from dcpctl.launch.cuda_graphs import sglang_decode_sizes
from dcpctl.runtime.engine.warm_up import warm_up_lengths
from dcpctl.runtime.kernels import fp8_gemm, fp8_tiles
from dcpctl.runtime.models import fp8_precompile
from tests.runtime.fp8_compile_check import Sm90Driver

H200_SMS = 132
TOP_K, EXPERTS = 8, 16
# DeepSeek-V3's block-FP8 GEMMs at TP 1, (N, K): what one decode step runs (attention: q_a + kv_a joined, q_b,
# o_proj; layer 0's dense MLP; the shared expert) and the routed experts' grouped GEMMs
DENSE = {"q_a+kv_a": (2112, 7168), "q_b_proj": (24576, 1536), "o_proj": (7168, 16384),
         "dense gate+up": (36864, 7168), "dense down": (7168, 18432),
         "shared gate+up": (4096, 7168), "shared down": (7168, 2048)}
GROUPED = {"experts gate+up": (4096, 7168), "experts down": (7168, 2048)}


def collect(rows: dict[str, list[int]], gemms: dict[str, tuple[int, int]] | None = None) -> dict[str, list]:
    """Per GEMM, the specializations (fp8_precompile.Spec) the calls at the given row counts launch: Triton
    binds each call's arguments and computes its cache key for an sm_90 driver stand-in, then compiles and
    launches nothing (fp8_precompile.skipped)."""
    out: dict[str, list] = {}
    plain_linear, active, plain_tables = fp8_gemm.F.linear, driver._active, fp8_tiles.current
    h200 = fp8_tiles.tables_for("NVIDIA H200", 90)   # the tiles an H200 serves with (CPU tensors get the
                                                     # defaults)
    fp8_tiles.current = lambda device=None: h200
    driver.set_active(Sm90Driver())
    # DequantLinear's cuBLAS: not Triton
    fp8_gemm.F.linear = lambda x, w: x.new_empty(x.shape[0], w.shape[0])
    try:
        for name, (N, K) in (gemms or {**DENSE, **GROUPED}).items():
            grouped = name in GROUPED
            w8 = torch.empty((EXPERTS, N, K) if grouped else (N, K), dtype=torch.float8_e4m3fn)
            scale = torch.ones((EXPERTS,) * grouped + (-(-N // 128), -(-K // 128)))
            with fp8_precompile.skipped({}) as specs:
                for r in rows["grouped" if grouped else "dense"]:
                    x = torch.empty(r, K, dtype=torch.bfloat16)
                    ends = torch.full((EXPERTS,), r, dtype=torch.int32) if grouped else None
                    fp8_gemm.fp8_matmul(x, w8, scale, (128, 128), ends, sms=H200_SMS, mode="w8a16")
            out[name] = list(specs.values())
    finally:
        fp8_gemm.F.linear, fp8_tiles.current = plain_linear, plain_tables
        driver._active = active    # reset_active() would look for a real driver
    return out


def count(rows: dict[str, list[int]], gemms: dict[str, tuple[int, int]] | None = None) -> dict[str, dict]:
    """The distinct kernels (one compile each; GEMMs of one tile setting share a kernel, the shape being
    runtime arguments) the calls at the given row counts launch: in all and per GEMM."""
    per = collect(rows, gemms)
    union = set().union(*map(set, per.values()))
    return {"distinct": len(union), "by_kernel": dict(collections.Counter(s[1] for s in union)),
            "per_gemm": {k: {"kernels": len(v), "by_kernel": dict(collections.Counter(s[1] for s in v))}
                         for k, v in per.items()}}


def _compile_share(specs: list) -> int:
    # a worker process of --compile processes:N: its share compiled into the on-disk cache
    driver.set_active(Sm90Driver())
    for s in specs:
        fp8_precompile.kernel(s).preload(s[2])
    return len(specs)


def compile_all(specs: list, how: str) -> dict:
    """Compile specs for sm_90 into a fresh Triton cache `how` (serial, threads:N, processes:N); the wall time
    from the first compile to every kernel in memory."""
    kind, _, n = how.partition(":")
    workers = int(n or 1)
    if kind not in ("serial", "threads", "processes"):
        raise SystemExit(f"--compile {how!r}: serial, threads:N or processes:N")
    cache = Path(tempfile.mkdtemp(prefix="dcpctl-fp8-compiles-"))
    os.environ["TRITON_CACHE_DIR"] = str(cache)
    active = driver._active
    driver.set_active(Sm90Driver())
    for s in specs:    # nothing compiled in memory either
        fp8_precompile.kernel(s).device_caches.clear()
    t0 = time.perf_counter()
    try:
        if kind == "serial":
            for s in specs:
                fp8_precompile.kernel(s).preload(s[2])
        else:
            if kind == "processes":
                with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
                    list(pool.map(_compile_share, [specs[i::workers] for i in range(workers)]))
            fp8_precompile.compile_specs(specs, workers)   # processes: each loaded from the cache they filled
        wall = time.perf_counter() - t0
    finally:
        driver._active = active
    return {"how": how, "wall_s": round(wall, 1), "cubins": sum(1 for _ in cache.rglob("*.cubin"))}


def row_counts(max_bs: int, chunk: int) -> dict[str, list[int]]:
    """Row counts the dense GEMMs meet (decode graph batch sizes, the warm-up ladder's prompt lengths) and the
    grouped ones (TOP_K rows per token)."""
    tokens = sorted(set(sglang_decode_sizes(max_bs)) | set(warm_up_lengths(chunk)))
    return {"dense": tokens, "grouped": [t * TOP_K for t in tokens]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-bs", type=int, default=64, help="the largest CUDA-graph batch size")
    ap.add_argument("--chunk", type=int, default=8192, help="the prefill chunk (--chunked-prefill-size)")
    ap.add_argument("--json")
    ap.add_argument("--compile", help="then compile them for sm_90 on this CPU, each way of this comma list: "
                                      "serial, threads:N, processes:N")
    args = ap.parse_args()
    rows = row_counts(args.max_bs, args.chunk)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent,
                          capture_output=True, text=True, check=False).stdout.strip()
    doc = {"command": " ".join(["python", "-m", "benchmarks.fp8_compiles", *sys.argv[1:]]), "commit": head,
           "triton": triton.__version__, "max_bs": args.max_bs,
           "chunk": args.chunk, "token_counts": rows["dense"], **count(rows)}
    if args.compile:
        specs = sorted(set().union(*map(set, collect(rows).values())))
        doc["compile"] = {"cpus": len(os.sched_getaffinity(0)), "load_average_before": os.getloadavg()[0],
                          "runs": []}
        for how in args.compile.split(","):
            doc["compile"]["runs"].append(compile_all(specs, how))
            print(f"{how}: {doc['compile']['runs'][-1]}", file=sys.stderr)
    print(json.dumps(doc, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
