"""The one place that decides which attention kernel runs a batch; each decision said once (runtime/notes.py).

| decision                     | made                           | rule                                       |
| ---------------------------- | ------------------------------ | ------------------------------------------ |
| `resolve_path`: paged/layout | once, by the pool's device     | paged on CUDA (the registry's kernels over |
|                              |                                | a block table), else the exact reference   |
|                              |                                | over gathered rows                         |
| `forms`: absorbed or MHA     | once per batch, per chunk      | form.py's multiply-add count (host ints,   |
|                              |                                | the same on every rank of a DCP group)     |
| `absorbed`: which backend    | once per batch; a decode       | the registry's blockers, then              |
|                              | graph: once per graph, by its  | plan/attention_table.py `decide`: the      |
|                              | batch size and context bucket  | measured table per (batch, context)        |
| `mha`: which kernel          | per call (cheap blockers)      | the first registered mha kernel with no    |
|                              |                                | blocker, else the reference                |

    local attention: flashinfer (triton at B=1 ctx=8K, ...) for 128 kernel heads, bf16 KV, page 64 on ...
        (why)

The absorbed rule beyond the table: a one-token backend (FlashInfer, FlashMLA) leaves a batch with a longer
chunk (prefill, extend, verification: causal by global position over a striped shard, which their masks are
not) to ours; a decode graph's batch never asks a backend that cannot be captured (FlashInfer: its plan() is
host work every step) and says why instead; where no kernel runs (CPU, float64, odd rows) the reference runs.
Names and the one mapping from --attention-backend: plan/attention_names.py.  A backend's own variant stays
its own (ours: the Gluon or Triton build and its tiles, kernel_config.py and kernel_choice.py, said in its
note), as FlashInfer's wrapper picks its own kernel.
"""
from __future__ import annotations

import functools
from typing import Any

import torch
from torch import Tensor

from dcpctl.plan.attention_names import PORTABLE
from dcpctl.plan.attention_table import Key, Rule, decide, table_for
from dcpctl.plan.hf_config import MlaShape
from dcpctl.runtime import settings, tuned
from dcpctl.runtime.attention import backends
from dcpctl.runtime.attention.backends import ABSORBED, MHA, Absorbed, Call, Mha
from dcpctl.runtime.attention.form import pick_form
from dcpctl.runtime.attention.layout import SeqChunk
from dcpctl.runtime.notes import note_once

PATHS = ("auto", "paged", "layout")
KV_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float8_e4m3fn: "fp8_e4m3",
            torch.float32: "fp32", torch.float64: "fp64"}


def resolve_path(requested: str, device: torch.device) -> str:
    """'auto' -> 'paged' when the pool is on CUDA (the registry's kernels), else 'layout' (the exact
    reference)."""
    if requested not in PATHS:
        raise ValueError(f"attention_path {requested!r} is not supported; valid: {list(PATHS)}")
    path = requested if requested != "auto" else "paged" if device.type == "cuda" else "layout"
    if path == "layout":
        why = "asked for" if requested == "layout" else "auto: the KV pool is on the CPU"
        note_once("local attention: the torch reference over gathered shard rows (attention_path layout, "
                  f"{why})")
    return path


def forms(requested: str, chunks: list[SeqChunk], shape: MlaShape) -> list[bool]:
    """Per chunk: the MHA form? (`requested`: auto, absorbed or mha; form.py's rule), said once per reason."""
    out, why = pick_form(requested, chunks, shape)
    note_once(why)
    return out


def absorbed(requested: str, call: Call) -> Absorbed:
    """The absorbed backend that runs this batch (asked per layer, decided on its first: `lay.selected`).
    requested: --attention-backend (plan/attention_names.py)."""
    lay = call.lay
    if lay.selected is None:
        lay.selected = _absorbed(requested, call.q, call.pool, lay, call.v_dim, call.dcp_size)
    return backends.get(ABSORBED, lay.selected)


def mha(q: Tensor, kv_layer: Tensor, latent: int) -> Mha:
    """The MHA form's kernel: the first registered mha kernel with no blocker here (cuDNN through torch's SDPA
    op on CUDA for 16-bit inputs), else the exact torch reference."""
    b = next((b for b in backends.of_kind(MHA) if not b.reference and b.blocker(q, kv_layer, latent) is None),
             backends.reference(MHA))
    note_once(f"MHA-form attention kernel: {b.says()}")
    return b


def group_context(chunks: list[SeqChunk], dcp_size: int) -> int:
    """The local context the rule picks by: the longest request's rows on the DCP group's fullest rank,
    ceil(L / c), the same on every rank (a rank's own max local length can differ by one across ranks, and
    ranks that pick different backends would return partials of different LSE bases to one merge)."""
    return -(-max((ch.start + ch.num_tokens for ch in chunks), default=0) // dcp_size)


@functools.lru_cache(maxsize=None)
def rule_for(requested: str, key: Key, available: tuple[tuple[str, str | None], ...],
             sm: int | None = None) -> Rule:
    """The plan's rule for this key (memoized), said once."""
    rule = decide(key, requested, dict(available),
                  table_for(key.device, sm, settings.current().attention_table))
    note_once(f"local attention: {rule.summary()} for {key.text()} ({rule.reason})")
    return rule


def _gpu(device: torch.device) -> tuple[str, int | None]:
    return tuned.gpu(device) if device.type == "cuda" else (device.type, None)


def _absorbed(requested: str, q: Tensor, pool: Tensor, lay: Any, v_dim: int, dcp_size: int) -> str:
    # q: [T, Hk, R]  pool: [pages, P, R]  lay: a PagedLayout (lay.graph set: a decode graph's batch)
    graph = lay.graph is not None
    avail = tuple((b.name, b.graph if graph and b.graph else b.blocker(q, pool, v_dim))
                  for b in backends.of_kind(ABSORBED) if not b.reference)
    if all(why is not None for _, why in avail):
        return backends.reference(ABSORBED).name     # CPU, float64, odd rows: the reference (its run says
                                                     # why)
    name, sm = _gpu(pool.device)
    key = Key(q.shape[1], KV_NAMES.get(pool.dtype, str(pool.dtype)), pool.shape[1], name)
    if graph:     # the graph's batch size and context bucket (local rows), the same on every rank
        batch, ctx = q.shape[0], lay.max_local_len
    else:
        batch, ctx = len(lay.chunks), group_context(lay.chunks, dcp_size)
    which = rule_for(requested, key, avail, sm).pick(batch, ctx)
    if backends.get(ABSORBED, which).one_token and any(ch.num_tokens != 1 for ch in lay.chunks):
        note_once("local attention: ours for batches with a chunk of more than one token (prefill, extend "
                  f"and verification are causal by global position over a striped shard; {which}'s mask is "
                  "not)")
        ours = dict(avail).get(PORTABLE, "not registered") is None
        return PORTABLE if ours else backends.reference(ABSORBED).name
    return which
