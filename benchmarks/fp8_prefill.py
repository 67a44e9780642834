"""A prefill's linear layers in block FP8 against the same checkpoint dequantized to bf16, on one GPU.

    python -m benchmarks.fp8_prefill DIR [--tokens 256 1024 4096] [--mode auto|w8a16|w8a8] [--repeats 5]
                                     [--json OUT]

DIR: the DeepSeek-V3-shaped block-FP8 checkpoint of fp8_model_check.py (written there when absent: 3 layers,
16 routed experts, real dimensions). Each path loads it (FP8 kept, then dequantized to bf16) and runs the
forward of one prompt of T tokens (T = each --tokens value), timed with CUDA events, median of --repeats after
one untimed run. The attention is left out: a context that returns zeros stands in for it, so both paths time
the same work, all of it the model's own: the projections, the MoE (router, dispatch, grouped expert GEMMs),
norms, rope and the lm_head. What differs between the two is the GEMMs: fp8_gemm's kernels against cuBLAS
bf16.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import torch

from benchmarks.fp8_model_check import _load, write_checkpoint
from dcpctl.runtime.kernels import fp8_parts


class NoAttention:
    """An attention context whose attention is zeros: the model's other work, timed alone."""

    def __init__(self, kv_lora_rank: int):
        self.L = kv_lora_rank

    def attend(self, layer, q, kv_new, scale, q_is_group=False):
        return q.new_zeros(q.shape[0], q.shape[1], self.L)


def time_prefill(model, tokens: int, repeats: int) -> float:
    """Median ms of the forward (and lm_head) of one prompt of `tokens` tokens."""
    g = torch.Generator().manual_seed(tokens)
    ids = torch.randint(0, model.cfg.vocab_size, (tokens,), generator=g)
    pos = torch.arange(tokens)
    ctx = NoAttention(model.cfg.kv_lora_rank)
    times = []
    for i in range(repeats + 1):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        model.logits(model.forward(ids, pos, ctx)[-1:])
        b.record()
        torch.cuda.synchronize()
        if i:                    # the first run compiles the kernels for these row counts
            times.append(a.elapsed_time(b))
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="the checkpoint (written there first when absent)")
    ap.add_argument("--tokens", type=int, nargs="+", default=[256, 1024, 4096])
    ap.add_argument("--mode", choices=fp8_parts.CHOICES, default=None,
                    help="the FP8 path's method (default auto; dcpctl's --fp8-gemm)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--json")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("fp8_prefill.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    if args.mode:
        from dcpctl.runtime import settings
        settings.use(replace(settings.current(), fp8_gemm=args.mode))
    d = write_checkpoint(Path(args.dir), args.layers, args.experts)
    report = {"checkpoint": str(d), "mode": fp8_parts.activation_mode(), "gpu": torch.cuda.get_device_name(),
              "ms": {}}
    for name, keep in (("fp8", True), ("bf16", False)):
        m = _load(d, keep, torch.bfloat16, "cuda")[0]
        with torch.inference_mode():
            report["ms"][name] = {t: round(time_prefill(m, t, args.repeats), 3) for t in args.tokens}
        del m
    print(f"{'tokens':>7} {'fp8 ms':>9} {'bf16 ms':>9} {'bf16 / fp8':>10}")
    for t in args.tokens:
        f8, b16 = report["ms"]["fp8"][t], report["ms"]["bf16"][t]
        print(f"{t:>7} {f8:>9.3f} {b16:>9.3f} {b16 / f8:>10.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
