"""How many Triton kernels a block-FP8 server compiles at start: counted on the CPU with Triton's own keys.

    python benchmarks/fp8_compiles.py [--max-bs 64] [--chunk 8192] [--json OUT]

A first start of `dcpctl launch` on a block-FP8 checkpoint compiles one Triton kernel per distinct
specialization its FP8 GEMMs launch (fp8_gemm.py's MMA kernel, fp8_gemv.py's few-rows kernel, fp8_dequant.py):
the constexprs of the tile setting choose_tiles picks, num_warps/num_stages, and per integer argument whether it
is 1 or a multiple of 16 (pointers: 16-byte aligned or not). The decode step is captured at every CUDA-graph
batch size (SGLang's buckets up to --max-bs) and the warm-up prefills a ladder of prompt lengths
(engine/warm_up.py, up to --chunk), so each GEMM of DeepSeek-V3's shapes (TP 1, the 16 routed experts of
fp8_model_check.write_checkpoint, top-8) meets those row counts. Here every such call runs through
fp8_gemm.fp8_matmul on the CPU under a stand-in CUDA driver (sm_90, 132 SMs): Triton binds the arguments and
computes its cache key exactly as on the GPU, and the compile is skipped (recorded instead), so the count is the
number of kernels a first start compiles and a later start finds in Triton's on-disk cache (~/.triton/cache,
or $TRITON_CACHE_DIR). The bf16 path's own Triton kernels (norms, rope, gemm16, attention) are not counted.
"""
from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
from pathlib import Path

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from triton.runtime.jit import JITFunction

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dcpctl.launch.cuda_graphs import sglang_decode_sizes  # noqa: E402
from dcpctl.runtime.engine.warm_up import warm_up_lengths  # noqa: E402
from dcpctl.runtime.models import fp8_gemm, fp8_tiles  # noqa: E402

H200_SMS = 132
TOP_K, EXPERTS = 8, 16
# DeepSeek-V3's block-FP8 GEMMs at TP 1, (N, K): what one decode step runs (attention: q_a + kv_a joined, q_b,
# o_proj; layer 0's dense MLP; the shared expert) and the routed experts' grouped GEMMs
DENSE = {"q_a+kv_a": (2112, 7168), "q_b_proj": (24576, 1536), "o_proj": (7168, 16384),
         "dense gate+up": (36864, 7168), "dense down": (7168, 18432),
         "shared gate+up": (4096, 7168), "shared down": (7168, 2048)}
GROUPED = {"experts gate+up": (4096, 7168), "experts down": (7168, 2048)}


class _StandIn:
    """The calls JITFunction.run makes of the active driver, for an sm_90 target (no GPU touched)."""

    def get_current_target(self) -> GPUTarget:
        return GPUTarget("cuda", 90, 32)

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int) -> int:
        return 0


def count(rows: dict[str, list[int]], gemms: dict[str, tuple[int, int]] | None = None) -> dict[str, dict]:
    """The distinct (kernel, cache key) pairs the calls at the given row counts launch: in all (one compile each;
    GEMMs of one tile setting share a kernel, the shape being runtime arguments) and per GEMM."""
    seen: dict[str, set] = collections.defaultdict(set)
    name = [""]

    def record(self, key, *args, **kwargs):   # JITFunction._do_compile: note the key, compile nothing
        seen[name[0]].add((self.fn.__name__, key))
        return None
    plain, plain_linear, active = JITFunction._do_compile, fp8_gemm.F.linear, driver._active
    plain_tables = fp8_tiles.current
    h200 = fp8_tiles.tables_for("NVIDIA H200", 90)   # the tiles an H200 serves with (CPU tensors get the defaults)
    fp8_tiles.current = lambda device=None: h200
    driver.set_active(_StandIn())
    JITFunction._do_compile = record
    fp8_gemm.F.linear = lambda x, w: x.new_empty(x.shape[0], w.shape[0])   # DequantLinear's cuBLAS: not Triton
    try:
        for name[0], (N, K) in (gemms or {**DENSE, **GROUPED}).items():
            grouped = name[0] in GROUPED
            w8 = torch.empty((EXPERTS, N, K) if grouped else (N, K), dtype=torch.float8_e4m3fn)
            scale = torch.ones((EXPERTS,) * grouped + (-(-N // 128), -(-K // 128)))
            for r in rows["grouped" if grouped else "dense"]:
                x = torch.empty(r, K, dtype=torch.bfloat16)
                ends = torch.full((EXPERTS,), r, dtype=torch.int32) if grouped else None
                fp8_gemm.fp8_matmul(x, w8, scale, (128, 128), ends, sms=H200_SMS, mode="w8a16")
    finally:
        JITFunction._do_compile, fp8_gemm.F.linear, fp8_tiles.current = plain, plain_linear, plain_tables
        driver._active = active    # reset_active() would look for a real driver
    union = set().union(*seen.values())
    return {"distinct": len(union), "by_kernel": dict(collections.Counter(f for f, _ in union)),
            "per_gemm": {k: {"kernels": len(v), "by_kernel": dict(collections.Counter(f for f, _ in v))}
                         for k, v in seen.items()}}


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
    args = ap.parse_args()
    rows = row_counts(args.max_bs, args.chunk)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                          text=True, check=False).stdout.strip()
    doc = {"command": " ".join(["python", "benchmarks/fp8_compiles.py", *sys.argv[1:]]), "commit": head,
           "triton": triton.__version__, "max_bs": args.max_bs,
           "chunk": args.chunk, "token_counts": rows["dense"], **count(rows)}
    print(json.dumps(doc, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
