"""The block-FP8 kernels a server's graph capture and warm-up launch, compiled before them, several at a time.

    precompile(model, tokens, dp) -> note | None    on CUDA with FP8 weights kept; None where there are none
    gemm_calls(model, tokens, dp) -> [(weight, rows, grouped)]   the FP8 GEMMs run at those token counts
    specializations(calls, dtype, device) -> [Spec]  what Triton compiles for them (a dry pass: nothing runs)
    compile_specs(specs, threads) -> compiled        each into this process, `threads` at a time

A first start compiles one Triton kernel per specialization its FP8 GEMMs launch (the tile setting, num_warps,
and per integer argument whether it is 1 or a multiple of 16: 47 for DeepSeek-V3's GEMMs with graphs up to 64
and the default prefill chunk, benchmarks/fp8_compiles.py), each when the graph capture or the warm-up first
launches it, one after the other.  A compile needs no GPU, and threads overlap most of it (the MLIR and LLVM
passes and ptxas run outside Python: two threads on 2 CPUs take half the time), so before either runs:

1. every FP8 GEMM call they will make (gemm_calls: the model's FP8 weights at their row counts) goes through
   quant.grouped_linear on the GPU with Triton's jit_cache_hook answering "skip": Triton binds the arguments
   and computes its cache key as for the real launch, then neither compiles nor launches; the hook keeps the
   specialization as JITFunction.preload takes it;
2. Triton's AsyncCompileMode compiles them on a pool of threads, each loaded from Triton's on-disk cache
   (TRITON_CACHE_DIR, else ~/.triton/cache) where it is there (a start after the first compiles nothing), and
   puts every kernel in memory, where the capture and the warm-up find it.

Threads: the CPUs this process may use, shared among the node's ranks (LOCAL_WORLD_SIZE) (docs/fp8.md has
the times on a CPU of 2: threads against one at a time and against worker processes).  A GEMM not foreseen
here (a row count neither the capture nor the warm-up meets) compiles when first launched, as before.  CPUs
and pre-sm_89 GPUs dequantize the weights at load: no FP8 weight, nothing to do.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable, Iterator

import torch
from triton import knobs as triton_knobs
from triton.runtime._async_compile import AsyncCompileMode

from dcpctl import knobs
from dcpctl.runtime.kernels.fp8_tiles import PREFILL_DEQUANT_ROWS
from dcpctl.runtime.models.mlp import DenseMLP, MoE, token_passes
from dcpctl.runtime.models.quant import Fp8Weight, grouped_linear

Spec = tuple[str, str, str]   # (the kernel's module, its name, Triton's specialization JSON)
Call = tuple[Fp8Weight, int, int]   # (weight, rows, rows per expert of a grouped call; 0: dense)
ATTENTION = ("qkv_a", "q_b", "o_proj")   # MlaAttention's FP8 projections (and `pair`: q_a, kv_a unjoined)


def gemm_calls(model: Any, tokens: Iterable[int], dp: int = 1) -> list[Call]:
    """(weight, rows, grouped): one per distinct layout and row count of the FP8 GEMMs a forward of each token
    count runs, per replica: attention's projections over its tokens, the MLP's over every replica's (dp x);
    routed experts in passes of up to BLOCK_TOKENS tokens (mlp.token_passes), a pass grouped over its tokens x
    top_k rows where mlp.MoE.runs_grouped says so (block-FP8: up to GROUPED_MAX_TOKENS tokens), else one GEMM
    per expert of as many rows as routed there (data-dependent: every count up to one past
    PREFILL_DEQUANT_ROWS, above which the kernel is the same)."""
    tokens = sorted(set(tokens))
    mlp_tokens = sorted({t * dp for t in tokens})
    calls: dict[tuple, Call] = {}

    def add(ws: Iterable[Any], rows: Iterable[int], per: Any = None) -> None:
        for w in ws:
            if isinstance(w, Fp8Weight):
                for r in rows:
                    p = per(r) if per else 0
                    calls.setdefault((_layout(w), r, p), (w, r, p))
    for layer in model.layers:
        attn = getattr(layer, "attn", None)
        add([getattr(attn, n, None) for n in ATTENTION] + list(getattr(attn, "pair", None) or ()), tokens)
        mlp = getattr(layer, "mlp", None)
        if isinstance(mlp, DenseMLP):
            add(mlp.weights(), mlp_tokens)
        elif isinstance(mlp, MoE):
            if mlp.shared is not None:
                add(mlp.shared.weights(), mlp_tokens)
            passes = sorted({n for t in mlp_tokens for n in token_passes(t)})
            if mlp.stacked is not None:
                k = mlp.router.cfg.top_k
                add(mlp.stacked, [n * k for n in passes if mlp.runs_grouped(n)],
                    lambda r, mlp=mlp, k=k: mlp.rows_per_expert(r // k))
            if not all(mlp.runs_grouped(n) for n in passes):
                for e in mlp.experts:
                    add(e.weights(), range(1, PREFILL_DEQUANT_ROWS + 2))
    return list(calls.values())


def _layout(w: Fp8Weight) -> tuple:
    # what a kernel specializes on besides the rows: shapes, strides, dtypes, 16-byte alignment
    return tuple((tuple(t.shape), t.stride(), t.dtype, t.data_ptr() % 16)
                 for t in (w.w8, w.scale)) + (w.block,)


@contextlib.contextmanager
def skipped(specs: dict[str, Spec]) -> Iterator[dict[str, Spec]]:
    """While the block runs, every Triton kernel not compiled in this process is neither compiled nor
    launched; specs gathers each such specialization once (Triton's jit_cache_hook: a true answer skips
    both)."""
    def hook(*, fn: Any, compile: dict, **_: Any) -> bool:
        data = compile["specialization_data"]
        specs.setdefault(data, (fn.jit_function.module, fn.jit_function.fn.__name__, data))
        return True
    before = triton_knobs.runtime.jit_cache_hook
    triton_knobs.runtime.jit_cache_hook = hook
    try:
        yield specs
    finally:
        triton_knobs.runtime.jit_cache_hook = before


def specializations(calls: list[Call], dtype: torch.dtype, device: torch.device | str) -> list[Spec]:
    """The specializations Triton would compile for these calls, made as the model makes them
    (quant.grouped_linear on `dtype` rows; a grouped call's group ends are data, no part of a key): no Triton
    kernel runs (a GEMM the method sends to cuBLAS does run, on the uninitialized rows: only its quantization
    launch is Triton's)."""
    specs: dict[str, Spec] = {}
    with skipped(specs), torch.no_grad():
        for w, rows, per in calls:
            x = torch.empty(rows, w.shape[-1], dtype=dtype, device=device)
            ends = torch.full((w.shape[0],), rows, dtype=torch.int32, device=device) if per else None
            grouped_linear(x, w, ends, per or None)
    return list(specs.values())


def kernel(spec: Spec) -> Any:
    return getattr(importlib.import_module(spec[0]), spec[1])


def compile_specs(specs: list[Spec], threads: int) -> int:
    """Every spec's kernel compiled (or loaded from Triton's on-disk cache) into this process, `threads` at a
    time; returns how many were compiled, not loaded.  A compile that fails is left to the launch that needs
    it (which then fails as it would have without this)."""
    compiled = []
    before = triton_knobs.compilation.listener

    def listen(**kw: Any) -> None:
        if not kw["cache_hit"]:
            compiled.append(1)
        if before is not None:
            before(**kw)
    triton_knobs.compilation.listener = listen
    try:
        with ThreadPoolExecutor(threads) as pool, AsyncCompileMode(pool, ignore_errors=True):
            for spec in specs:
                kernel(spec).preload(spec[2])
    finally:
        triton_knobs.compilation.listener = before
    return len(compiled)


def cpus() -> int:
    """CPUs for this rank's compiles: those this process may run on, shared among the node's ranks."""
    return max(1, len(os.sched_getaffinity(0)) // max(1, int(knobs.get("LOCAL_WORLD_SIZE"))))  # type: ignore[arg-type]


def precompile(model: Any, tokens: Iterable[int], dp: int = 1) -> str | None:
    """Steps 1-2 of the module docstring for a forward at each token count; the note saying what it did, or
    None where the model runs no FP8 GEMM on a GPU."""
    calls = gemm_calls(model, tokens, dp) if model.device.type == "cuda" else []
    if not calls:
        return None
    specs = specializations(calls, model.dtype, model.device)
    if not specs:     # every kernel these forwards launch is loaded in this process already
        return None
    threads = min(len(specs), cpus())
    t0 = time.perf_counter()
    compiled = compile_specs(specs, threads)
    took = time.perf_counter() - t0
    what = f"FP8 kernels: the {len(specs)} Triton specializations the graph capture and the warm-up launch"
    where = f"Triton's cache ({triton_knobs.cache.dir})"
    if not compiled:
        return f"{what} were all in {where}: loaded before them in {took:.1f} s, none compiled"
    how = (f"{threads} at a time ({cpus()} CPUs for this rank)" if threads > 1 else
           "one at a time (one CPU for this rank)")
    return (f"{what}: {compiled} compiled before them in {took:.1f} s, {how} rather than one by one at their "
            f"first launch, into {where}, which keeps them for the next start")
