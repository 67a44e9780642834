"""Weights pulled into L2 while the attention kernel runs (issue 17: the decode step's GEMMs read HBM alone).

A decode layer reads its weights from HBM back to back, except while attention runs: at 128 kernel heads that
kernel is compute-bound (ctx 1K: 14-39 us a layer at batch 1-32) and reads only the batch's KV rows.  Before
it, one small launch asks the TMA unit to prefetch into L2 (`cp.async.bulk.prefetch.L2`, sm_90) the
weights the layer reads right after it: all of w_vc (the value bmm's [H, L, v]) and a share of o_proj, in
chunks spread evenly over the weight (every k-th chunk), so each tile of the GEMM that follows finds the same
share in L2.  A prefetch changes no value (the GEMMs read the same bytes), only where they come from.  Prefill
and extend chunks get it too (one launch a layer, beside their long attention).

Off by default: it is built and tested (tests/runtime/test_l2_prefetch.py) but not yet timed on a GPU
(benchmarks/gpu_l2_prefetch.sh is the A/B that decides whether it pays and which shares; docs/benchmarks-serve.md).

    DCPCTL_L2_PREFETCH="w_vc:1,o_proj:0.125"   what to prefetch (name:share of its bytes), read at model load
    DCPCTL_L2_PREFETCH_OPTS="ctas=8,chunk=1024,side=0"   the launch (programs, bytes a chunk, own stream)
    (items are separated by ',' or '+')
    DCPCTL_UNFUSED=l2_prefetch                  off (models/fusions.py)

Only on CUDA devices of compute capability 9.0 and newer, for contiguous 16-bit weights; elsewhere nothing runs.
"""
from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from typing import Iterator

import torch
from torch import Tensor

from dcpctl.runtime.models.errors import ModelLoadError
from dcpctl.runtime.models.norm_triton import triton

ENV, OPTS_ENV = "DCPCTL_L2_PREFETCH", "DCPCTL_L2_PREFETCH_OPTS"
DEFAULT = ""     # nothing until a GPU run shows a share that pays
NAMES = ("w_vc", "o_proj")

if triton is not None:
    import triton.language as tl

    @triton.jit
    def _l2_prefetch_kernel(base, n_chunks, stride, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
        # base: the weight's bytes; chunk c (c < n_chunks) is bytes [c * stride, c * stride + CHUNK)
        pid, nprog = tl.program_id(0), tl.num_programs(0)
        size = tl.full((BLOCK,), CHUNK, tl.int32)
        for c0 in range(pid * BLOCK, n_chunks, nprog * BLOCK):
            c = c0 + tl.arange(0, BLOCK)
            c = tl.where(c < n_chunks, c, c0)       # past the end: chunk c0 again (a prefetch changes nothing)
            tl.inline_asm_elementwise("cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0;", "=r,l,r",
                                      [base + c.to(tl.int64) * stride, size], dtype=tl.int32, is_pure=False, pack=1)


@dataclass(frozen=True)
class Plan:
    shares: tuple[tuple[str, float], ...]   # (weight name, share of its bytes in L2 before the GEMM)
    ctas: int = 8
    chunk: int = 1024
    side: bool = False                      # launch on a stream of its own (joined after attention)


def _number(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ModelLoadError(f"{what}: {text!r} is not a number") from None


def _items(raw: str) -> list[str]:
    return [s.strip() for s in re.split(r"[,+]", raw) if s.strip()]


def plan_from_env() -> Plan:
    """The plan DCPCTL_L2_PREFETCH and DCPCTL_L2_PREFETCH_OPTS name (ModelLoadError on a bad value)."""
    raw = os.environ.get(ENV, DEFAULT).strip()
    shares = []
    for item in _items(raw):
        name, _, share = item.partition(":")
        if name not in NAMES:
            raise ModelLoadError(f"{ENV} names {name!r}; valid: {', '.join(NAMES)}")
        f = _number(share or "1", f"{ENV} {name}")
        if not 0 < f <= 1:
            raise ModelLoadError(f"{ENV} {name}: share {f} is not in (0, 1]")
        shares.append((name, f))
    opts = {}
    for item in _items(os.environ.get(OPTS_ENV, "")):
        k, _, v = item.partition("=")
        if k not in ("ctas", "chunk", "side"):
            raise ModelLoadError(f"{OPTS_ENV} names {k!r}; valid: ctas, chunk, side")
        opts[k] = int(_number(v, f"{OPTS_ENV} {k}"))
    plan = Plan(tuple(shares), opts.get("ctas", 8), opts.get("chunk", 1024), bool(opts.get("side", 0)))
    if plan.ctas < 1 or plan.chunk < 16 or plan.chunk % 16:
        raise ModelLoadError(f"{OPTS_ENV}: ctas >= 1 and a chunk of a multiple of 16 bytes, got {plan}")
    return plan


def layout(nbytes: int, share: float, chunk: int) -> tuple[int, int]:
    """(chunks, stride in bytes) that prefetch about `share` of `nbytes` as every k-th chunk of `chunk` bytes
    (k = round(1 / share)), only whole chunks inside the weight."""
    stride = chunk * max(1, round(1 / share))
    return (nbytes - chunk) // stride + 1 if nbytes >= chunk else 0, stride


def device_ok(t: Tensor) -> bool:
    """Whether this weight can be prefetched: contiguous 16-bit on a CUDA device of sm_90 or newer."""
    return (triton is not None and t.is_cuda and t.dtype in (torch.bfloat16, torch.float16) and t.is_contiguous()
            and torch.cuda.get_device_capability(t.device) >= (9, 0))


@dataclass
class Targets:
    plan: Plan
    items: list[tuple[Tensor, int, int]]    # (weight bytes, chunks, stride)

    def launch(self) -> None:
        for b, n, stride in self.items:
            _l2_prefetch_kernel[(min(self.plan.ctas, -(-n // 32)),)](b, n, stride, CHUNK=self.plan.chunk,
                                                                     BLOCK=32, num_warps=1)


def targets(plan: Plan | None, weights: dict[str, Tensor]) -> Targets | None:
    """What one layer prefetches before its attention (None: nothing, e.g. on the CPU)."""
    if plan is None:
        return None
    items = []
    for name, share in plan.shares:
        w = weights.get(name)
        if isinstance(w, Tensor) and device_ok(w):
            n, stride = layout(w.numel() * w.element_size(), share, plan.chunk)
            if n:
                items.append((w.view(-1).view(torch.uint8), n, stride))
    if items and plan.side:       # the stream made at load, not first inside a graph capture
        _side(items[0][0].device)
    return Targets(plan, items) if items else None


_SIDE: dict[int, torch.cuda.Stream] = {}


def _side(device: torch.device) -> torch.cuda.Stream:
    """The prefetch's own stream on this device (one per device)."""
    if device.index not in _SIDE:
        _SIDE[device.index] = torch.cuda.Stream(device)
    return _SIDE[device.index]


@contextlib.contextmanager
def during(t: Targets | None) -> Iterator[None]:
    """Prefetch t's weights, then run the block (the attention): on the block's stream, or on a stream of its
    own joined after the block (a CUDA-graph capture records the fork and the join)."""
    if t is None:
        yield
        return
    if not t.plan.side:
        t.launch()
        yield
        return
    main = torch.cuda.current_stream()
    side = _side(main.device)
    side.wait_stream(main)
    with torch.cuda.stream(side):
        t.launch()
    try:
        yield
    finally:
        main.wait_stream(side)
