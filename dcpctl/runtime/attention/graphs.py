"""CUDA graphs of the decode step: one graph per batch size over static buffers, replayed per step.

Captured: the model's layer stack (rope, MLA attention through the paged DCP context, the
exchanges, the dense MLP, the final norm).  Left eager: the embedding lookup (its vocab-slice
mask is data-dependent) and everything on the host.  Buffers, shared by every batch size and
never reallocated after capture (a graph of batch B uses their first B rows):

| buffer       | shape                  | per step                                             |
| ------------ | ---------------------- | ---------------------------------------------------- |
| hidden       | [Bmax, D]              | the eager embedding of the step's input ids          |
| positions    | [Bmax] int64           | global position of each request's new token          |
| row_req      | [Bmax] int32           | arange (one query row per request), fixed            |
| block_table  | [Bmax + 1, max_pages]  | row i: chunk i's pages; only changes are written     |
|              |                        | (`block_table.DeviceBlockTable`), stale tails unread |
| local_lens   | [Bmax + 1] int32       | local_len(position + 1, r, c)                        |
| write_rows   | [Bmax] int64           | arange, fixed                                        |
| write_slots  | [Bmax] int64           | owned rows' slots; rows this rank does not own (and  |
|              |                        | pads) go to `trash_slot`, a spare pool row           |

The kernel gets max_local_len = max_pages * P (fixed at capture: no host sync, splits sized for
the widest request).  Requires attention DP 1 (no per-step replica sizes) and a model whose MLP
has no data-dependent host sync (dense MLPs; MoE routing here syncs).
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from dcpctl.runtime.attention.block_table import DeviceBlockTable
from dcpctl.runtime.attention.dcp import DCPContext, decision
from dcpctl.runtime.attention.layout import SeqChunk
from dcpctl.runtime.attention.paged import PagedLayout
from dcpctl.runtime.kv.allocator import VirtualAllocator, local_len
from dcpctl.runtime.kv.pool import KVPool
from dcpctl.runtime.models.ops import rms_norm


def layer_stack(model: Any, h: Tensor, positions: Tensor, ctx: DCPContext) -> Tensor:
    """DeepseekModel.forward after the embedding (attention DP 1): what the graph captures."""
    # h: [B, D]  positions: [B] -> [B, D]
    cos, sin = model.rotary.cos_sin(positions)
    eps, up = model.cfg.rms_norm_eps, model.rotary.upcast
    for layer in model.layers:
        h = h + layer.attn.forward(rms_norm(h, layer.input_norm, eps, up), cos, sin, ctx)
        h = h + model._mlp(layer.mlp, rms_norm(h, layer.post_norm, eps, up), None)
    return rms_norm(h, model.norm, eps, up)


class DecodeGraphs:
    """Decode-step graphs for `batch_sizes` (see module docstring)."""

    def __init__(self, model: Any, alloc: VirtualAllocator, pool: KVPool, decisions: dict, v_dim: int,
                 batch_sizes: list[int], max_pages: int, trash_slot: int) -> None:
        if model.ps.attn_dp_size != 1:
            raise ValueError(f"CUDA graphs need attention DP 1, got attn_dp_size ({model.ps.attn_dp_size})")
        self.model, self.alloc, self.pool = model, alloc, pool
        self.c, self.rank = alloc.dcp, model.ps.dcp.rank
        self.page = alloc.page_tokens // alloc.dcp
        self.max_pages, self.trash = max_pages, trash_slot
        dev, bmax = pool.kv.device, max(batch_sizes)
        i32 = dict(dtype=torch.int32, device=dev)
        self.hidden = torch.zeros(bmax, model.cfg.hidden_size, dtype=model.dtype, device=dev)
        self.positions = torch.zeros(bmax, dtype=torch.int64, device=dev)
        self.q_pos = torch.zeros(bmax, **i32)
        self.row_req = torch.arange(bmax, **i32)
        self.block_table = torch.zeros(bmax + 1, max_pages, **i32)
        self.table = DeviceBlockTable(self.block_table)
        self.local_lens = torch.zeros(bmax + 1, **i32)
        self.write_rows = torch.arange(bmax, dtype=torch.int64, device=dev)
        self.write_slots = torch.full((bmax,), trash_slot, dtype=torch.int64, device=dev)
        self.backend = decision(decisions, "dcp_comm_backend", "ag_rs")
        self.base, self.v_dim = str(decision(decisions, "lse_base", "e")), v_dim
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, Tensor]] = {}
        self.cuda = pool.kv.is_cuda      # off CUDA (tests): replay runs the same stack eagerly on the buffers
        self._mempool = torch.cuda.graph_pool_handle() if self.cuda else None
        for b in sorted(batch_sizes, reverse=True):
            self.graphs[b] = self._capture(b) if self.cuda else (None, None)

    def _context(self, b: int) -> DCPContext:
        lay = PagedLayout(self.positions[:b], self.q_pos[:b], self.row_req[:b], self.block_table[:b + 1],
                          self.local_lens[:b + 1], self.write_rows[:b], self.write_slots[:b],
                          self.max_pages * self.page, self.page, [])
        return DCPContext(lay, self.pool, self.model.ps.dcp, self.backend, self.base, self.v_dim)

    def _capture(self, b: int) -> tuple[torch.cuda.CUDAGraph, Tensor]:
        ctx, stream = self._context(b), torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):      # warm-up: compiles the kernels, touches no real slot
            layer_stack(self.model, self.hidden[:b], self.positions[:b], ctx)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._mempool):
            out = layer_stack(self.model, self.hidden[:b], self.positions[:b], ctx)
        return graph, out

    def graph_size(self, n: int) -> int:
        fits = [b for b in self.graphs if b >= n]
        if not fits:
            raise ValueError(f"decode batch ({n}) > largest captured batch size ({max(self.graphs)})")
        return min(fits)

    def prepare(self, ids: Tensor, chunks: list[SeqChunk]) -> int:
        """Fill the static buffers for one decode step (one token per chunk); returns the graph size."""
        # ids: [n] -> hidden[:n]; O(batch + new pages) host work (the table writes only what changed)
        n, b = len(chunks), self.graph_size(len(chunks))
        pos = [ch.start for ch in chunks] + [0] * (b - n)
        lens = [local_len(p + 1, self.rank, self.c) for p in pos[:n]] + [0] * (b - n + 1)
        slots = [self.trash] * b
        rows = []
        for i, ch in enumerate(chunks):
            pages = self.alloc.pages(ch.rid)          # the live list, not a copy: indexing is O(1)
            rows.append((i, ch.rid, self.alloc.pages_for(ch.start + 1), pages))
            if ch.start % self.c == self.rank:
                slots[i] = pages[ch.start // self.alloc.page_tokens] * self.page \
                    + (ch.start % self.alloc.page_tokens) // self.c
        self.table.update(rows)
        self.hidden[:n].copy_(self.model._embed(ids))
        self.hidden[n:b].zero_()
        self.positions[:b].copy_(torch.tensor(pos), non_blocking=True)
        self.q_pos[:b].copy_(torch.tensor(pos, dtype=torch.int32), non_blocking=True)
        self.local_lens[:b + 1].copy_(torch.tensor(lens, dtype=torch.int32), non_blocking=True)
        self.write_slots[:b].copy_(torch.tensor(slots), non_blocking=True)
        return b

    def replay(self, ids: Tensor, chunks: list[SeqChunk]) -> Tensor:
        """One decode step: hidden [n, D] after the final norm (a view of the graph's output)."""
        if any(ch.num_tokens != 1 for ch in chunks):
            raise ValueError("CUDA graphs replay decode steps only (one token per request)")
        b = self.prepare(ids, chunks)
        graph, out = self.graphs[b]
        if graph is None:
            out = layer_stack(self.model, self.hidden[:b], self.positions[:b], self._context(b))
        else:
            graph.replay()
        return out[:len(chunks)]
