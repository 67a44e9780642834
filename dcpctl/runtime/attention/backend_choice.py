"""Which backend reads the pool for one batch of the paged path: the facts here, the rule in plan.attention_table.

    local attention: flashinfer (triton at B=1 ctx=8K, ...) for 128 kernel heads, bf16 KV, page 64 on NVIDIA H200 (why)

is said once per rule (`note_once`); per batch the rule picks by (batch, max local length), both host ints; a
CUDA-graph capture (graphs.py) picks once per graph, by its batch size and context bucket.
Ours (`triton`: the Gluon or Triton kernel, kernel_choice) also runs a batch FlashInfer or FlashMLA cannot take:
chunks of more than one token, and FlashInfer under a capture (its per-step plan() needs host page lists the graph
buffers do not carry).  FlashMLA's per-batch metadata is a device kernel, so a graph replays it with the step
(tests/runtime/test_gpu_flashmla.py checks replays against eager).
"""
from __future__ import annotations

import functools

import torch
from torch import Tensor

from dcpctl.plan.attention_table import Key, Rule, decide, table_for
from dcpctl.runtime import settings, tuned
from dcpctl.runtime.attention.flashinfer_mla import blocker as flashinfer_blocker
from dcpctl.runtime.attention.flashmla import blocker as flashmla_blocker
from dcpctl.runtime.attention.triton_mla import MAX_PADDED, kernel_takes, triton_available
from dcpctl.runtime.notes import note_once

GRAPH_LAYOUT = "CUDA-graph replay: FlashInfer plans each step on the host and the graph buffers carry no host page lists"
FIELD_KERNELS = ("flashinfer", "flashmla")     # decode-only: a chunk of more than one token runs ours
KV_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float8_e4m3fn: "fp8_e4m3", torch.float32: "fp32",
            torch.float64: "fp64"}


def triton_blocker(q: Tensor, pool: Tensor, v_dim: int) -> str | None:
    """Why ours cannot run this batch (a clause), or None."""
    if q.device.type != "cuda":
        return "the KV pool is on the CPU"
    if not triton_available(q.device):
        return "Triton is not installed"
    if q.dtype == torch.float64:
        return "float64 runs the exact reference"
    if not kernel_takes(v_dim, q.shape[-1]):
        return (f"the latent row {v_dim} + {q.shape[-1] - v_dim} is wider than the kernel's {MAX_PADDED[0]} + "
                f"{MAX_PADDED[1]}")
    return None


def _gpu(device: torch.device) -> tuple[str, int | None]:
    return tuned.gpu(device) if device.type == "cuda" else (device.type, None)


@functools.lru_cache(maxsize=None)
def rule_for(requested: str, key: Key, available: tuple[tuple[str, str | None], ...], sm: int | None = None) -> Rule:
    """The plan's rule for this key (memoized), said once."""
    rule = decide(key, requested, dict(available), table_for(key.device, sm, settings.current().attention_table))
    note_once(f"local attention: {rule.summary()} for {key.text()} ({rule.reason})")
    return rule


def choose(requested: str, q: Tensor, pool: Tensor, lay: object, v_dim: int, dcp_size: int = 1) -> str:
    """'flashinfer', 'flashmla', 'triton' or 'torch' for this batch (asked per layer, decided once per batch).
    q: [T, Hk, R]  pool: [pages, P, R]  lay: a PagedLayout."""
    state = lay.backend_state          # type: ignore[attr-defined]
    if state.get("backend") is None:
        state["backend"] = _choose(requested, q, pool, lay, v_dim, dcp_size)
    return state["backend"]


def group_context(chunks: list, dcp_size: int) -> int:
    """The local context the rule picks by: the longest request's rows on the DCP group's fullest rank,
    ceil(L / c), the same on every rank (a rank's own max local length can differ by one across ranks, and
    ranks that pick different backends would return partials of different LSE bases to one merge)."""
    return -(-max((ch.start + ch.num_tokens for ch in chunks), default=0) // dcp_size)


def _choose(requested: str, q: Tensor, pool: Tensor, lay: object, v_dim: int, dcp_size: int) -> str:
    # graph buffers (no host page lists) never ask FlashInfer: its plan() runs on the host every step
    graph = lay.host_lens is None      # type: ignore[attr-defined]
    fi = GRAPH_LAYOUT if graph else flashinfer_blocker(pool, v_dim, q.dtype)
    avail = (("triton", triton_blocker(q, pool, v_dim)), ("flashinfer", fi),
             ("flashmla", flashmla_blocker(pool, v_dim, q.dtype)))
    if all(why is not None for _, why in avail):
        return "torch"                 # CPU, float64, odd rows: the reference (paged_attention says why)
    name, sm = _gpu(pool.device)
    key = Key(q.shape[1], KV_NAMES.get(pool.dtype, str(pool.dtype)), pool.shape[1], name)
    if graph:     # a capture: the graph's batch size and context bucket (local rows), the same on every rank
        batch, ctx = q.shape[0], lay.max_local_len     # type: ignore[attr-defined]
    else:
        batch, ctx = len(lay.chunks), group_context(lay.chunks, dcp_size)     # type: ignore[attr-defined]
    which = rule_for(requested, key, avail, sm).pick(batch, ctx)
    if which in FIELD_KERNELS and any(ch.num_tokens != 1 for ch in lay.chunks):   # type: ignore[attr-defined]
        note_once("local attention: ours for batches with a chunk of more than one token (prefill, extend and "
                  f"verification are causal by global position over a striped shard; {which}'s mask is not)")
        return "triton" if avail[0][1] is None else "torch"
    return which
