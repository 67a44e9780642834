"""FlashMLA's dense paged decode (sm_90a) as a local attention backend of the paged DCP path.

What FlashMLA needs, and what the runtime's pool gives it:

| FlashMLA (csrc/flash_api.cpp, kernels/config.h)     | the runtime                                          |
| --------------------------------------------------- | ---------------------------------------------------- |
| k_cache [blocks, 64, h_k, 576], unit last stride   | the fused layer [pages, P, 576]: `pool.unsqueeze(2)` |
| page block size 64 (Config::PAGE_BLOCK_SIZE)        | --page-size: any other P makes it unavailable        |
| bf16 or fp16 q and KV (this build: bf16 only)       | bf16 pools; fp8/fp32/fp64 pools run ours             |
| sm_90 (it checks major 9, minor 0)                  | H100/H200/H800/H20; other GPUs run ours              |
| block_table [b, pages] int32, seqlens [b] int32     | block_table rows and local_lens, per query row       |

The KV is read in place (zero copy, TMA over the pool's own strides).  Per forward batch, once: each query row
gets its chunk's block-table row and local length, and FlashMLA's tile-scheduler metadata (a device kernel,
no host sync).  The decode graphs keep the metadata outside the graph (`GraphRows`): it depends on each row's
block count ceil(len / 64) only (get_mla_metadata.cu splits rows by blocks; a split's end length reaches the
kernel only through ceil_div(end, 64), splitkv_mla.cu lines 1036-1039 without the causal mask, which decode
does not use), so the host recomputes it before a replay only when a row's block count changed: once in 64
steps. Empty shards (local length 0) and pads read one row of page 0 and their lse is set to -inf afterwards
(docs/design.md section 1): FlashMLA itself writes lse = +inf for a zero-length row (splitkv_mla.cu
`cur_L == 0 ? INFINITY`), which the merge would take as a winner.  Its lse is base e (it writes logf(L) + m /
log2(e)); returned tagged "e". Chunks of more than one token (prefill, extend, verification) are causal by
global position over a striped shard, which FlashMLA's causal mask is not: ours runs those.
"""
from __future__ import annotations

import torch
from torch import Tensor

from dcpctl.plan.attention_table import FLASHMLA_PAGE
from dcpctl.runtime.attention.flashmla_setup import load
from dcpctl.runtime.attention.fused_merge import store_owner_major
from dcpctl.runtime.attention.triton_mla import MLAOut

ROWS = (512, 64)                 # HEAD_DIM_V, HEAD_DIM_K - HEAD_DIM_V: the only latent row its kernel is
                                 # built for
Rows = tuple[Tensor, Tensor | None, Tensor, Tensor]   # decode_rows: (seqlens >= 1, seen, tile metadata,
                                                      # splits)
Batch = tuple[Tensor, Rows]                           # prepare: (each query row's block-table row, its Rows)


def blocker(pool: Tensor, v_dim: int, q_dtype: torch.dtype) -> str | None:
    """Why FlashMLA cannot read this [pages, P, R] layer view (a clause), or None when it can (builds on first
    ask)."""
    if pool.device.type != "cuda":
        return "the KV pool is not on a GPU"
    cap = torch.cuda.get_device_capability(pool.device)
    if cap != (9, 0):
        return f"FlashMLA's dense decode runs on sm_90 only; this GPU is sm_{cap[0]}{cap[1]}"
    if pool.shape[1] != FLASHMLA_PAGE:
        return f"page size {pool.shape[1]}: FlashMLA's kernel reads pages of {FLASHMLA_PAGE} rows only"
    if (v_dim, pool.shape[-1] - v_dim) != ROWS:
        return f"the latent row {v_dim} + {pool.shape[-1] - v_dim} is not FlashMLA's {ROWS[0]} + {ROWS[1]}"
    if pool.dtype != torch.bfloat16 or q_dtype != torch.bfloat16:
        return (f"the KV pool is {str(pool.dtype).removeprefix('torch.')} with "
                f"{str(q_dtype).removeprefix('torch.')} queries (this FlashMLA build reads bf16 only)")
    mod, why = load()
    return why if mod is None else None


def decode_rows(lens: Tensor, heads: int, mask: bool = True) -> Rows:
    """(seqlens >= 1, seen (None unless mask), tile metadata, num_splits) for query rows of local lengths lens
    [T] int32 (device)."""
    lens, seen = _clamped(lens, mask)
    meta, splits = load()[0].get_mla_metadata(lens, heads, 1)   # type: ignore[union-attr]
    return lens, seen, meta, splits


def _clamped(lens: Tensor, mask: bool) -> tuple[Tensor, Tensor | None]:
    """(seqlens >= 1, seen (None unless mask)): an empty row reads one row of page 0; its lse is masked
    after."""
    return lens.clamp_min(1).contiguous(), (lens > 0 if mask else None)


def run(q: Tensor, pool: Tensor, table: Tensor, rows: Rows, scale: float,
        v_dim: int) -> tuple[Tensor, Tensor]:
    # q: [T, Hk, R]  pool: [pages, 64, R]  table: [T, pages] int32 -> o [T, Hk, v_dim] q.dtype, lse [T, Hk]
    # base e (seen None: the lse of an empty row is left as it comes, for a caller that reads o only)
    lens, seen, meta, splits = rows
    o, lse = load()[0].fwd_kvcache_mla(q.unsqueeze(1), pool.unsqueeze(2), v_dim, lens, table,  # type: ignore
                                       scale, False, meta, splits)
    lse = lse.squeeze(-1)
    return o.squeeze(1), lse if seen is None else torch.where(seen[:, None], lse, float("-inf"))


def blocks(lens: list[int]) -> list[int]:
    """Each row's block count as FlashMLA's metadata counts it (an empty row reads one row: one block)."""
    return [(n + FLASHMLA_PAGE - 1) // FLASHMLA_PAGE or 1 for n in lens]


class GraphRows:
    """The tile metadata of the decode graphs' batches, kept outside the graphs (module docstring): one pair
    of buffers per batch size, which the graphs read, and the block counts they were made for."""

    def __init__(self, heads: int) -> None:
        self.heads = heads
        self.bufs: dict[int, tuple[Tensor, Tensor]] = {}    # batch size -> (tile metadata, num_splits)
        self.made_for: dict[int, list[int]] = {}            # batch size -> the block counts of its metadata

    def _make(self, t: int, lens: Tensor) -> None:
        """Batch size t's metadata from lens (int32 >= 1, device), into its buffers (made on the first
        call)."""
        made = load()[0].get_mla_metadata(lens, self.heads, 1)   # type: ignore[union-attr]
        if t in self.bufs:
            for buf, new in zip(self.bufs[t], made):
                buf.copy_(new)
        else:
            self.bufs[t] = tuple(made)     # type: ignore[assignment]

    def decode_rows(self, lens: Tensor, mask: bool, recording: bool) -> Rows:
        """decode_rows for a graph of lens.shape[0] rows: the capture's eager warm-up run (recording False)
        makes the metadata; the recording reads the buffers, which `refresh` fills before each replay."""
        t = lens.shape[0]
        lens, seen = _clamped(lens, mask)
        if not recording:
            self._make(t, lens)
            self.made_for.pop(t, None)         # made from the device's lengths: the next replay remakes it
        elif t not in self.bufs:
            raise RuntimeError(f"FlashMLA's graph metadata for batch {t} is captured before an eager call "
                               "made it")
        return (lens, seen, *self.bufs[t])

    def refresh(self, host_lens: list[int], lens: Tensor) -> None:
        """Before a replay of len(host_lens) rows of local lengths host_lens (lens: the same on the device,
        any int dtype, already written): remake the metadata when a row's block count changed."""
        t, counts = len(host_lens), blocks(host_lens)
        if self.made_for.get(t) != counts:
            self._make(t, lens.clamp_min(1).to(torch.int32))
            self.made_for[t] = counts


def prepare(q: Tensor, lay: object, mask: bool = True, graph: GraphRows | None = None,
            recording: bool = False) -> Batch:
    """(each query row's block-table row, decode_rows): once per batch, every layer has the same rows.  A
    decode layout (rows_are_chunks) gives its first T rows as they are; others gather a row per query.  mask:
    the caller reads the lse (DCP above 1), so an empty row's is set to -inf.  graph: a decode graph's batch
    keeps the metadata in the graphs' GraphRows (recording: the graph records; else the capture's eager
    warm-up run)."""
    t = q.shape[0]
    if lay.rows_are_chunks:           # type: ignore[attr-defined]
        table, lens = lay.block_table[:t], lay.local_lens[:t]   # type: ignore[attr-defined]
    else:
        rr = lay.row_req              # type: ignore[attr-defined]
        table = lay.block_table.index_select(0, rr).contiguous()     # type: ignore[attr-defined]
        lens = lay.local_lens.index_select(0, rr)    # type: ignore[attr-defined]
    if graph is None:
        return table, decode_rows(lens, q.shape[1], mask)
    return table, graph.decode_rows(lens, mask, recording)


def decode(q: Tensor, pool: Tensor, batch: Batch, scale: float, v_dim: int,
           out: tuple[Tensor, Tensor] | None = None) -> MLAOut:
    # q: [T, Hk, R]  pool: [pages, 64, R]  batch: prepare's -> o [T, Hk, v_dim] q.dtype, lse [T, Hk] base e
    # out: the owner-major destination ([c, T, Hk/c, v_dim], [c, T, Hk/c]), as triton_mla.mla_decode
    q = q.contiguous()
    o, lse = run(q, pool, batch[0], batch[1], scale, v_dim)
    if out is not None:
        store_owner_major(out, o.flatten(0, 1), lse.flatten())
        return MLAOut(*out, "e")
    return MLAOut(o, lse, "e")


def flashmla_decode(q: Tensor, pool: Tensor, lay: object, scale: float, v_dim: int,
                    out: tuple[Tensor, Tensor] | None = None) -> MLAOut:
    """prepare (eager, masked) once per batch, kept in lay.backend_state as backends.run keeps it, then
    decode."""
    state = lay.backend_state             # type: ignore[attr-defined]
    if "flashmla" not in state:
        state["flashmla"] = prepare(q, lay)
    return decode(q, pool, state["flashmla"], scale, v_dim, out)
