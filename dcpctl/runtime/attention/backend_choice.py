"""Which absorbed backend reads the pool for one batch of the paged path: the registry's backends (attention/backends)
say what blocks each here, plan.attention_table's rule picks among the rest.

    local attention: flashinfer (triton at B=1 ctx=8K, ...) for 128 kernel heads, bf16 KV, page 64 on NVIDIA H200 (why)

is said once per rule (`note_once`); per batch the rule picks by (batch, max local length), both host ints; a
CUDA-graph capture (graphs.py) picks once per graph, by its batch size and context bucket.
Ours (`triton`: the Gluon or Triton kernel, kernel_choice) also runs a batch FlashInfer or FlashMLA cannot take:
chunks of more than one token (a backend's `one_token`), and FlashInfer under a capture (its `graph` reason: its
per-step plan() needs host page lists the graph buffers do not carry).  FlashMLA's per-batch metadata is a device
kernel, so a graph can capture it; the decode graphs keep it outside and remake it before a replay when a row's
block count changed (flashmla.GraphRows; tests/runtime/attention/test_gpu_flashmla.py checks replays against eager).
"""
from __future__ import annotations

import functools

import torch
from torch import Tensor

from dcpctl.plan.attention_table import FALLBACK, Key, Rule, decide, table_for
from dcpctl.runtime import settings, tuned
from dcpctl.runtime.attention import backends
from dcpctl.runtime.attention.backends import ABSORBED
from dcpctl.runtime.notes import note_once

KV_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float8_e4m3fn: "fp8_e4m3", torch.float32: "fp32",
            torch.float64: "fp64"}


def _gpu(device: torch.device) -> tuple[str, int | None]:
    return tuned.gpu(device) if device.type == "cuda" else (device.type, None)


@functools.lru_cache(maxsize=None)
def rule_for(requested: str, key: Key, available: tuple[tuple[str, str | None], ...], sm: int | None = None) -> Rule:
    """The plan's rule for this key (memoized), said once."""
    rule = decide(key, requested, dict(available), table_for(key.device, sm, settings.current().attention_table))
    note_once(f"local attention: {rule.summary()} for {key.text()} ({rule.reason})")
    return rule


def choose(requested: str, q: Tensor, pool: Tensor, lay: object, v_dim: int, dcp_size: int = 1) -> str:
    """A registered absorbed backend's name ('triton', 'flashinfer', 'flashmla', 'torch', ...) for this batch
    (asked per layer, decided once per batch).
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
    # graph buffers (no host page lists) never ask a backend that cannot be captured (FlashInfer: its plan() is host
    # work every step), and say why instead
    graph = lay.host_lens is None      # type: ignore[attr-defined]
    avail = tuple((b.name, b.graph if graph and b.graph else b.blocker(q, pool, v_dim))
                  for b in backends.of_kind(ABSORBED) if not b.fallback)
    if all(why is not None for _, why in avail):
        return backends.fallback(ABSORBED).name     # CPU, float64, odd rows: the reference (its run says why)
    name, sm = _gpu(pool.device)
    key = Key(q.shape[1], KV_NAMES.get(pool.dtype, str(pool.dtype)), pool.shape[1], name)
    if graph:     # a capture: the graph's batch size and context bucket (local rows), the same on every rank
        batch, ctx = q.shape[0], lay.max_local_len     # type: ignore[attr-defined]
    else:
        batch, ctx = len(lay.chunks), group_context(lay.chunks, dcp_size)     # type: ignore[attr-defined]
    which = rule_for(requested, key, avail, sm).pick(batch, ctx)
    if backends.get(ABSORBED, which).one_token and any(ch.num_tokens != 1 for ch in lay.chunks):  # type: ignore
        note_once("local attention: ours for batches with a chunk of more than one token (prefill, extend and "
                  f"verification are causal by global position over a striped shard; {which}'s mask is not)")
        ours = dict(avail).get(FALLBACK, "not registered")
        return FALLBACK if ours is None else backends.fallback(ABSORBED).name
    return which
