"""FlashInfer's MLA paged decode as a local attention backend of the paged DCP path.

FlashInfer reads the runtime's own pool: ckv = pool[..., :v_dim] and kpe = pool[..., v_dim:] are strided
views of the fused [pages, P, R] layer (zero copy; its kernels take the page and row strides).  Its page
offset is `page_index * stride_page` in uint32 (include/flashinfer/attention/mla_hopper.cuh
prefetch_offset), so a layer view over 2^32 elements would wrap: `blocker` says so and ours runs.

Per forward batch, one plan (host ints only, no device sync): query row i is the decode token of chunk i,
its rank-local pages (`PagedLayout.host_tables`) and local length (`host_lens`); pads and empty shards
(local length 0) get one row of page 0 and their lse is set to -inf afterwards (docs/design.md section 1: an
empty shard contributes lse = -inf only).  Chunks of more than one token (prefill, extend, verification) are
causal by global position over a striped shard, which FlashInfer's mask cannot say: ours runs those.
FlashInfer's lse is base 2 (mla_hopper.cuh writes log2(d) + m); it is returned tagged "2" and the merge
takes base 2.  run() is capturable in a CUDA graph once planned; plan() is host work before each replay.
"""
from __future__ import annotations

import functools
import itertools
from typing import NamedTuple

import torch
from torch import Tensor

from dcpctl.runtime.attention.flashinfer_setup import load
from dcpctl.runtime.attention.fused_merge import store_owner_major
from dcpctl.runtime.attention.triton_mla import MLAOut

MAX_KV_ELEMENTS = 1 << 32
WORKSPACE_BYTES = 128 << 20      # the float workspace FlashInfer's MLA docs recommend
ROWS = (512, 64)                 # the latent row its MLA kernels are built and tested for (DeepSeek/Kimi)
_plan_ids = itertools.count(1)


def blocker(pool: Tensor, v_dim: int, q_dtype: torch.dtype) -> str | None:
    """Why FlashInfer cannot read this [pages, P, R] layer view (a clause), or None when it can."""
    if pool.device.type != "cuda":
        return "the KV pool is not on a GPU"
    fi, why = load()
    if fi is None:
        return why
    if (v_dim, pool.shape[-1] - v_dim) != ROWS:
        return f"the latent row {v_dim} + {pool.shape[-1] - v_dim} is not FlashInfer's {ROWS[0]} + {ROWS[1]}"
    if pool.dtype not in (torch.bfloat16, torch.float16) or q_dtype != pool.dtype:
        return (f"the KV pool is {str(pool.dtype).removeprefix('torch.')} with "
                f"{str(q_dtype).removeprefix('torch.')} queries (it reads 16-bit pools of the query's dtype)")
    if pool.numel() > MAX_KV_ELEMENTS:
        return (f"the layer's pool has {pool.numel()} elements, over 2^32: FlashInfer's uint32 page offset "
                "would wrap")
    return None


class _Planner:
    """One float workspace per GPU, one wrapper per head count, re-planned when a new batch asks."""

    def __init__(self, device: torch.device) -> None:
        self.fi = load()[0]
        self.ws = torch.empty(WORKSPACE_BYTES, dtype=torch.int8, device=device)
        self.wrappers: dict[int, object] = {}
        self.planned: dict[int, tuple] = {}

    def ready(self, plan_key: tuple, heads: int, rows: tuple[Tensor, Tensor, Tensor], page: int, scale: float,
              dtype: torch.dtype) -> object:
        w = self.wrappers.get(heads)
        if w is None:
            w = self.wrappers[heads] = self.fi.mla.BatchMLAPagedAttentionWrapper(self.ws, backend="auto")
        if self.planned.get(heads) != plan_key:
            qo, kv_indptr, kv_lens = rows[0], rows[1], rows[2]
            w.plan(qo_indptr=qo, kv_indptr=kv_indptr, kv_indices=rows[3], kv_len_arr=kv_lens, num_heads=heads,
                   head_dim_ckv=ROWS[0], head_dim_kpe=ROWS[1], page_size=page, causal=False, sm_scale=scale,
                   q_data_type=dtype, kv_data_type=dtype)
            self.planned[heads] = plan_key
        return w


@functools.lru_cache(maxsize=None)
def _planner(device: torch.device) -> _Planner:
    return _Planner(device)


def plan_rows(host_tables: list[list[int]], host_lens: list[int], n_rows: int, page: int,
              device: torch.device) -> tuple[Tensor, ...]:
    """(qo_indptr, kv_indptr, kv_len host int32; kv_indices on device) for n_rows query rows (pads last)."""
    lens = [max(n, 1) for n in host_lens] + [1] * (n_rows - len(host_lens))
    pages: list[int] = []
    indptr = [0]
    for i, n in enumerate(lens):
        pages += host_tables[i][:-(-n // page)] if i < len(host_lens) and host_lens[i] else [0]
        indptr.append(len(pages))
    i32 = dict(dtype=torch.int32)
    return (torch.arange(n_rows + 1, **i32), torch.tensor(indptr, **i32), torch.tensor(lens, **i32),
            torch.tensor(pages, **i32).to(device, non_blocking=True))


class Batch(NamedTuple):
    """One forward batch's plan inputs (prepare), read by every layer."""

    rows: tuple[Tensor, ...]     # plan_rows
    plan_id: int                 # a new plan() per batch, not per layer
    seen: Tensor                 # [T] bool: query rows whose chunk has local rows (the others' lse is -inf)


def prepare(q: Tensor, pool: Tensor, lay: object) -> Batch:
    # q: [T, Hk, R]  pool: [pages, P, R]  lay: a decode-only PagedLayout with host page lists
    rows = plan_rows(lay.host_tables, lay.host_lens, q.shape[0], pool.shape[1], q.device)  # type: ignore
    return Batch(rows, next(_plan_ids), lay.local_lens.index_select(0, lay.row_req) > 0)  # type: ignore[attr-defined]


def decode(q: Tensor, pool: Tensor, batch: Batch, scale: float, v_dim: int,
           out: tuple[Tensor, Tensor] | None = None) -> MLAOut:
    # q: [T, Hk, R]  pool: [pages, P, R] -> o [T, Hk, v_dim] q.dtype, lse [T, Hk] base 2
    # out: the owner-major destination ([c, T, Hk/c, v_dim], [c, T, Hk/c]), as triton_mla.mla_decode
    q = q.contiguous()
    h = q.shape[1]
    w = _planner(q.device).ready((batch.plan_id, scale, q.dtype), h, batch.rows, pool.shape[1], scale,
                                 q.dtype)
    o, lse = w.run(q[..., :v_dim], q[..., v_dim:], pool[..., :v_dim], pool[..., v_dim:], return_lse=True)
    lse = torch.where(batch.seen[:, None], lse, float("-inf"))
    if out is not None:
        store_owner_major(out, o.flatten(0, 1), lse.flatten())
        return MLAOut(*out, "2")
    return MLAOut(o, lse, "2")


def flashinfer_decode(q: Tensor, pool: Tensor, lay: object, scale: float, v_dim: int,
                      out: tuple[Tensor, Tensor] | None = None) -> MLAOut:
    """prepare once per batch, kept in lay.backend_state as backends.run keeps it, then decode."""
    state = lay.backend_state             # type: ignore[attr-defined]
    if "flashinfer" not in state:
        state["flashinfer"] = prepare(q, pool, lay)
    return decode(q, pool, state["flashinfer"], scale, v_dim, out)
