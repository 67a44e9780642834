"""The paged fast path: one forward batch as the MLA decode kernel's inputs, built from page lists.

A request's virtual page k is physical page k on every rank (physical(v) = v // c, and a widened
page of P*c virtual slots is P physical rows), so rank r's local row j of a request sits at

    page = pages[j // P]        row = page * P + j % P        (global position j*c + r)

and the kernel reads the pool as [pages, P, R] through a block table.  Everything here is
O(batch + pages), never O(context): per chunk one row of the block table (its pages up to the
chunk's end), its local length local_len(end, r, c), and the owned new rows' write slots.

| field        | shape               | meaning                                                 |
| ------------ | ------------------- | ------------------------------------------------------- |
| positions    | [T] int64           | global position of each batch token (pads: 0)          |
| q_pos        | [T] int32           | the same, 32-bit, as the kernel takes it                |
| row_req      | [T] int32           | block-table row of each token (pads: the empty row n;   |
|              |                     | rows_are_chunks: row i is row i, a decode batch)        |
| block_table  | [n + 1, pages] int32| chunk i's pages (row n: none, for pads)                 |
| local_lens   | [n + 1] int32       | local_len(end_i, r, c) (row n: 0)                       |
| write_rows   | [N] int64           | batch rows whose position this rank owns                |
| write_slots  | [N] int64           | their physical slots                                    |
| host_tables  | n lists (host)      | chunk i's pages, as the block table (FlashInfer's plan) |
| host_lens    | n ints (host)       | local_lens without the pad row (None: not known on host)|

Which absorbed backend reads the pool (attention/backends: ours, FlashInfer, FlashMLA, the torch reference) is
the selector's (`selector.absorbed`); `paged_attention` runs it through the registry (`backends.run`: its
per-batch `prepare`, or `capture` for a decode graph's batch, then its kernel).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from torch import Tensor

from dcpctl.runtime.attention import backends, selector
from dcpctl.runtime.attention.layout import SeqChunk, to_device_many
from dcpctl.runtime.attention.triton_mla import MLAOut
from dcpctl.runtime.kv.allocator import VirtualAllocator, local_len, owned_page_rows_tensor


class GraphPass(NamedTuple):
    """A decode graph's batch, as its backends are told it (backends/base.py `capture`)."""

    kept: dict          # what backends keep across the graphs' captures and replays, by name (`refresh`)
    recording: bool     # the graph records this pass; False: the capture's eager warm-up run


@dataclass
class PagedLayout:
    """See the module table (T batch tokens, n chunks, N owned new rows)."""

    positions: Tensor
    q_pos: Tensor             # positions as int32, made once per batch rather than once per layer
    row_req: Tensor
    block_table: Tensor
    local_lens: Tensor
    write_rows: Tensor
    write_slots: Tensor
    max_local_len: int        # host int: the kernel sizes its splits without a device sync
    page_size: int
    chunks: list[SeqChunk]
    host_tables: list[list[int]] | None = None
    host_lens: list[int] | None = None
    backend_state: dict = field(default_factory=dict)   # per batch: each backend's prepared state, by name
    rows_are_chunks: bool = False   # query row i reads block-table row i (decode: one token per chunk, no pad
                                    # rows past the empty one): a backend may slice the table instead of
                                    # gathering it
    graph: GraphPass | None = None  # a decode graph's batch (engine/decode_graphs.py), else None: an eager
                                    # batch
    selected: str | None = None     # the absorbed backend the selector picked for this batch (on its first
                                    # layer)


# The table's row stride is a kernel argument, and Triton compiles one variant for strides divisible by 16 and
# one for the rest: padding the width to a multiple of 16 keeps every batch on one variant, so the warm-up
# before ready compiles it and no request later pays a compile (~1 s on an H200)
TABLE_ALIGN = 16


def build_paged(alloc: VirtualAllocator, chunks: list[SeqChunk], dcp_rank: int, page_size: int,
                device: torch.device | str = "cpu", pad: int = 0,
                max_pages: int | None = None) -> PagedLayout:
    """Kernel inputs for one rank from the allocator's page lists (chunks must be allocated).

    max_pages pads the block table's width (CUDA graphs keep one shape); default: the widest chunk.
    """
    c = alloc.dcp
    none = torch.zeros(0, dtype=torch.int64)
    cols: dict[str, list[Tensor]] = {k: [none] for k in ("positions", "row_req", "write_rows", "write_slots")}
    table: list[list[int]] = []
    lens: list[int] = []
    rows = 0
    for i, ch in enumerate(chunks):      # host tensors per chunk: a long prefill chunk costs a few vector ops
        end, pages = ch.start + ch.num_tokens, alloc.pages(ch.rid)
        own, slots = owned_page_rows_tensor(torch.tensor(pages, dtype=torch.int64), ch.start, end, dcp_rank,
                                            c, page_size * c, rows)
        cols["write_rows"].append(own)
        cols["write_slots"].append(slots)
        cols["positions"].append(torch.arange(ch.start, end))
        cols["row_req"].append(torch.full((ch.num_tokens,), i, dtype=torch.int64))
        rows += ch.num_tokens
        table.append(pages[:alloc.pages_for(end)])
        lens.append(local_len(end, dcp_rank, c))
    cols["positions"].append(torch.zeros(pad, dtype=torch.int64))
    cols["row_req"].append(torch.full((pad,), len(chunks), dtype=torch.int64))
    width = max([len(t) for t in table] + [1, max_pages or 0])
    width = -(-width // TABLE_ALIGN) * TABLE_ALIGN
    bt = torch.zeros(len(chunks) + 1, width, dtype=torch.int32)
    for i, t in enumerate(table):
        bt[i, :len(t)] = torch.tensor(t, dtype=torch.int32)
    col = lambda k, dt=torch.int64: torch.cat(cols[k]).to(dt)  # noqa: E731
    pos, pos32, req, bt, seq_lens, w_rows, w_slots = to_device_many(
        [col("positions"), col("positions", torch.int32), col("row_req", torch.int32), bt,
         torch.tensor(lens + [0], dtype=torch.int32), col("write_rows"), col("write_slots")], device)
    decode = pad <= 1 and all(ch.num_tokens == 1 for ch in chunks)
    return PagedLayout(pos, pos32, req, bt, seq_lens, w_rows, w_slots, max(lens + [0]), page_size,
                       list(chunks), table, lens, rows_are_chunks=decode)


def paged_attention(q: Tensor, kv_layer: Tensor, lay: PagedLayout, scale: float, v_dim: int,
                    dcp_rank: int, dcp_size: int, out: tuple[Tensor, Tensor] | None = None,
                    descriptors: dict | None = None, requested: str = "auto",
                    out_dtype: torch.dtype | None = None) -> MLAOut:
    # q: [T, Hk, R]  kv_layer: [C, R] one layer of the pool -> MLAOut(o [T, Hk, v_dim], lse [T, Hk], its base)
    # requested: --attention-backend (auto: the measured table; selector.absorbed decides)
    # out_dtype: o's dtype from our kernels (default fp32; the field kernels return q's dtype)
    # out: write into a destination instead ([c, T, Hk/c, v_dim], [c, T, Hk/c]; see triton_mla.mla_decode)
    if q.shape[0] == 0 and out is not None:
        return MLAOut(*out, "e")
    if q.shape[0] == 0:    # an idle replica still runs every collective, with empty tensors
        dt = torch.float64 if q.dtype == torch.float64 else torch.float32
        return MLAOut(q.new_zeros(0, q.shape[1], v_dim, dtype=dt), q.new_zeros(0, q.shape[1], dtype=dt), "e")
    pool = kv_layer.view(-1, lay.page_size, kv_layer.shape[-1])
    call = backends.Call(q, pool, lay, scale, v_dim, dcp_rank, dcp_size, out, out_dtype, descriptors)
    return backends.run(selector.absorbed(requested, call), call)

