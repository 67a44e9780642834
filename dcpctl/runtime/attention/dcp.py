"""The DCP AttentionContext: one per forward batch, built by the engine from allocator state.

Per MLA layer (`attend`):
  1. write the batch's new latent rows that this rank owns (owner(v) = v % c) into its pool;
  2. gather the DCP group's query heads (skipped when q_is_group or c = 1);
  3. local attention over this rank's shard: its cached prefix rows plus the batch's owned new
     rows, causal by global position.  Two paths with identical results (attention_path decision):
     `layout` gathers the shard rows by slot (O(context) host indices; one masked matmul for small
     batches, per chunk otherwise), `paged` hands the pool as [pages, P, R] plus a block table to
     the backend the selector picks (O(batch + pages) host work; the default when the pool is on CUDA);
  4. merge across the group with `ag_rs` or `a2a` exactly as the launch config decided.
`attend_mha` is the same four steps in the MHA form (attention/mha.py, for long prefills and extends: the
model asks once per batch, attention/selector.py): the query is qk wide, the shard's latent rows are
up-projected per head block by block, and the partials merged over the group are v wide.  A mixed batch
(`split`: some chunks in each form) gives the layer an absorbed and an MHA sub-context over their chunks, run
in that order everywhere.

Chunked prefill / extend attends the local shard and merges like decode (exact by the merge
identity), instead of gathering prefix shards to restore token order: one code path for prefill,
decode and verification.  T = 0 still runs every collective with empty tensors.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from dcpctl.contract.launch_config import Decisions
from dcpctl.runtime.attention.comm import (exchange_a2a, exchange_ag_rs, exchange_packed, gather_heads,
                                           lanes_in_place, pack_by_owner, send_buffer)
from dcpctl.runtime.attention import selector
from dcpctl.runtime.attention.form import part_of
from dcpctl.runtime.attention.fused_merge import merge_a2a, rescale_partial, store_owner_major
from dcpctl.runtime.attention.layout import SeqChunk, ShardLayout, build_layout, host_ints, to_device
from dcpctl.runtime.attention.local import DENSE_LIMIT, attention_mask, local_attention, segmented_attention
from dcpctl.runtime.attention.mha import BLOCK_BYTES, ShardChunk, shard_attention
from dcpctl.runtime.attention.paged import PagedLayout, build_paged, paged_attention
from dcpctl.runtime.kv.allocator import VirtualAllocator, local_len, local_len_sum
from dcpctl.runtime.kv.pool import KVPool
from dcpctl.runtime.parallel import Axis
from dcpctl.plan.hf_config import MlaShape

BACKENDS = ("ag_rs", "a2a")
__all__ = ["BACKENDS", "DCPContext", "SeqChunk", "ShardLayout", "build_context", "build_layout"]


@dataclass
class DCPContext:
    """Implements attention.api.AttentionContext for one forward batch."""

    layout: ShardLayout | PagedLayout   # PagedLayout: the paged fast path
    pool: KVPool
    dcp: Axis
    backend: str          # decisions["dcp_comm_backend"]
    lse_base: str         # decisions["lse_base"]: base of the LSE local attention returns
    v_dim: int            # kv_lora_rank
    kv_bytes_read: int = 0
    exchange_seconds: float = 0.0  # wall time in the query gather and the merge collectives
    sync_timing: bool = False      # CUDA: synchronize around collectives so exchange_seconds is exact
    dense_limit: int = DENSE_LIMIT  # T * S above which local attention runs per chunk
    kv_bytes_hint: int = 0          # paged path: KV bytes per layer from host ints (no device sync)
    attention_backend: str = "auto"  # decisions["attention_backend"]: --attention-backend (selector.absorbed)
    attention_form: str = "auto"     # absorbed / MHA per chunk (attention/form.py); tests pin one
    mha_block_bytes: int = BLOCK_BYTES  # the MHA form's up-projected key block, at most (tests shrink it)
    _mask: Tensor | None = field(default=None, repr=False)
    alloc: VirtualAllocator | None = field(default=None, repr=False)   # builds a mixed batch's sub-contexts
    parent: DCPContext | None = field(default=None, repr=False)        # a sub-context counts into its batch's
    _forms: list[bool] | None = field(default=None, repr=False)
    _parts: list[tuple[Tensor, DCPContext, bool]] | None = field(default=None, repr=False)
    # the MHA form's, built by its first layer
    _chunks: list[ShardChunk] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.dcp.size > 1 and self.backend not in BACKENDS:
            raise ValueError(f"dcp_comm_backend {self.backend!r} is not supported by this runtime; "
                             f"valid: {list(BACKENDS)}")

    @property
    def positions(self) -> Tensor:
        return self.layout.positions

    @property
    def num_tokens(self) -> int:
        return self.layout.positions.numel()

    def mask(self) -> Tensor:
        if self._mask is None:
            lay = self.layout
            self._mask = attention_mask(lay.positions, lay.seq, lay.kv_pos, lay.kv_seq)
        return self._mask

    @property
    def paged(self) -> bool:
        return isinstance(self.layout, PagedLayout)

    def _local(self, q: Tensor, kv: Tensor, scale: float) -> tuple[Tensor, Tensor]:
        # q: [T, Hk, R]  kv: [S, R] -> o [T, Hk, L], lse [T, Hk]: one masked matmul when small, else per chunk
        lay = self.layout
        if q.shape[0] * kv.shape[0] <= self.dense_limit:
            return local_attention(q, kv, self.mask(), scale, self.v_dim, self.lse_base)
        return segmented_attention(q, kv, lay.positions, lay.kv_pos, lay.q_bounds, lay.kv_bounds,
                                   scale, self.v_dim, self.lse_base)

    def kv_destination(self, layer: int) -> tuple[Tensor, Tensor, Tensor]:
        """(pool rows [C, R] of `layer`, batch rows [W], their slots [W]): where `attend` writes the new
        latent rows (row i of the batch at slot i); a model that writes them itself (one fused kernel) passes
        kv_new=None."""
        return self.pool.kv[layer], self.layout.write_rows, self.layout.write_slots

    def _pick(self, shape: MlaShape) -> list[bool]:
        # per chunk: MHA form?  Decided once per batch (the selector), said once per reason
        if self._forms is None:
            self._forms = selector.forms(self.attention_form, self.layout.chunks, shape)
        return self._forms

    def use_mha(self, shape: MlaShape) -> bool:
        """Whether every chunk of this batch runs in the MHA form (`attend_mha`)."""
        forms = self._pick(shape)
        return bool(forms) and all(forms)

    def split(self, shape: MlaShape) -> list[tuple[Tensor, DCPContext, bool]] | None:
        """A mixed batch (some chunks MHA, some absorbed): [(batch rows [Ti] int64, sub-context, MHA?)], the
        absorbed part first; each sub-context writes, attends and merges its own chunks.  None: one form."""
        forms = self._pick(shape)
        if self._parts is None and any(forms) and not all(forms) and self.alloc is not None:
            self._parts = [self._part(forms, mha) for mha in (False, True)]
        return self._parts

    def _part(self, forms: list[bool], mha: bool) -> tuple[Tensor, DCPContext, bool]:
        chunks, rows = part_of(self.layout.chunks, forms, mha)
        lay, rank, dev = self.layout, self.dcp.rank, self.layout.positions.device
        sub = build_paged(self.alloc, chunks, rank, lay.page_size, dev) if self.paged else \
            build_layout(self.alloc, chunks, rank, dev)
        hint = kv_rows(self.alloc, chunks, rank) * self.pool.kv.shape[-1] * self.pool.kv.element_size()
        ctx = replace(self, layout=sub, kv_bytes_hint=hint, parent=self, _mask=None,
                      _forms=[mha] * len(chunks), _parts=None, _chunks=None)
        return to_device(host_ints(rows), dev), ctx, mha

    def _count(self, kv_bytes: int = 0, seconds: float = 0.0) -> None:
        # a sub-context's reads and exchange time count into its batch (the engine reads the batch's context)
        into = self.parent or self
        into.kv_bytes_read += kv_bytes
        into.exchange_seconds += seconds

    def attend_mha(self, layer: int, q: Tensor, kv_new: Tensor | None, scale: float, w_kv: Tensor,
                   q_is_group: bool = False) -> Tensor:
        # q: [T, Hl, nope + rope] or [T, Hl*c, nope + rope] (q_is_group)  kv_new: [T, R] or None (as attend)
        # w_kv: [Hl*c, nope + v, L] the DCP group's kv_b_proj -> [T, Hl, v]
        self._write(layer, kv_new)
        if self._chunks is None:      # every layer reads the same shard rows: their slots once a batch
            self._chunks = self._shard_chunks()
        chunks = self._chunks
        self._count(sum(ch.n_rows for ch in chunks) * self.pool.kv.shape[-1] * self.pool.kv.element_size())
        c = self.dcp.size
        local = lambda qq: shard_attention(qq, self.pool.kv[layer], chunks, w_kv, self.v_dim,  # noqa: E731
                                           self.dcp.rank, c, scale, self.mha_block_bytes)
        if c == 1:
            return local(q)[0].to(q.dtype)
        t0 = self._clock(q)
        q_group = q if q_is_group else gather_heads(q, self.dcp)
        t1 = self._clock(q)
        o, lse = local(q_group)
        t2 = self._clock(q)
        fused = q.is_cuda and q.dtype != torch.float64 and q.shape[0] > 0
        if self.backend == "ag_rs":
            out = exchange_ag_rs(o, lse, "e", self.dcp, rescale_partial if fused else None)
        else:
            out = exchange_a2a(o, lse, "e", self.dcp, q.dtype, merge_a2a if fused else None, q.dtype)
        self._count(seconds=(t1 - t0) + (self._clock(q) - t2))
        return out.to(q.dtype)

    def _shard_chunks(self) -> list[ShardChunk]:
        # per chunk: its batch rows, start, shard rows before start, shard rows in all, their pool slots
        lay, r, c = self.layout, self.dcp.rank, self.dcp.size
        out, row = [], 0
        for i, ch in enumerate(lay.chunks):
            end = ch.start + ch.num_tokens
            n = local_len(end, r, c)
            if isinstance(lay, PagedLayout):
                j = torch.arange(n, device=lay.block_table.device)
                pages = lay.block_table[i].long()
                slots = pages[j // lay.page_size] * lay.page_size + j % lay.page_size
            else:
                slots = lay.kv_slots[lay.kv_bounds[i]:lay.kv_bounds[i + 1]]
            out.append(ShardChunk(row, ch.num_tokens, ch.start, local_len(ch.start, r, c), n, slots))
            row += ch.num_tokens
        return out

    def _write(self, layer: int, kv_new: Tensor | None) -> None:
        # kv_new: [T, R] -> the owned rows into the pool (None: the model's fused kernel wrote them)
        if kv_new is not None:
            self.pool.write(layer, self.layout.write_slots, kv_new.index_select(0, self.layout.write_rows))

    def attend(self, layer: int, q: Tensor, kv_new: Tensor | None, scale: float,
               q_is_group: bool = False) -> Tensor:
        # q: [T, Hl, R] or [T, Hl*c, R] (q_is_group)  kv_new: [T, R], or None: already written
        # (kv_destination) -> [T, Hl, L]
        lay = self.layout
        self._write(layer, kv_new)
        if self.paged:
            attend = lambda qq, out=None, dt=None: self._attend_paged(layer, qq, scale, out, dt)  # noqa: E731
        else:
            kv = self.pool.read(layer, lay.kv_slots)
            self._count(kv.numel() * kv.element_size())

            def attend(qq: Tensor, out: tuple[Tensor, Tensor] | None = None,
                       dt: torch.dtype | None = None) -> tuple[Tensor, Tensor, str]:
                o, lse = self._local(qq, kv, scale)
                if out is None:
                    return o, lse, self.lse_base
                store_owner_major(out, o.flatten(0, 1), lse.flatten())
                return (*out, self.lse_base)
        c = self.dcp.size
        if c == 1:    # the kernel (or its split merge) rounds o to q's dtype as it stores it: no fp32 copy to
                      # cast
            return attend(q, None, q.dtype)[0].to(q.dtype)
        t0 = self._clock(q)
        q_group = q if q_is_group else gather_heads(q, self.dcp)
        t1 = self._clock(q)
        # Triton merges on CUDA; the exact torch paths elsewhere
        fused = q.is_cuda and q.dtype != torch.float64 and q.shape[0] > 0
        if self.backend == "ag_rs":
            o, lse, base = attend(q_group)
            t2 = self._clock(q)
            out = exchange_ag_rs(o, lse, base, self.dcp, rescale_partial if fused else None)
        else:   # the attention writes o and the LSE lanes straight into the a2a send buffer
            if not lanes_in_place(self.v_dim, q.dtype):   # odd width: pack by copy
                o, lse, base = attend(q_group)
                t2 = self._clock(q)
                buf = pack_by_owner(o, lse, q.dtype, c)        # the copy counts as exchange time, as before
            else:
                send = send_buffer(q_group.shape[0], q_group.shape[1], self.v_dim, c, q.dtype, q.device)
                base = attend(q_group, (send.o, send.lse))[2]
                buf = send.buf
                t2 = self._clock(q)
            out = exchange_packed(buf, base, self.dcp, q.dtype, self.v_dim, merge_a2a if fused else None,
                                  q.dtype)
        self._count(seconds=(t1 - t0) + (self._clock(q) - t2))
        return out.to(q.dtype)

    def _attend_paged(self, layer: int, q: Tensor, scale: float,
                      out: tuple[Tensor, Tensor] | None = None,
                      out_dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor, str]:
        # q: [T, Hk, R] -> o [T, Hk, L], lse [T, Hk], base (or the `out` views, see paged_attention)
        lay = self.layout
        self._count(self.kv_bytes_hint)
        res = paged_attention(q, self.pool.kv[layer], lay, scale, self.v_dim, self.dcp.rank, self.dcp.size,
                              out, self.pool.descriptors, self.attention_backend, out_dtype)
        return res.o, res.lse, res.base

    def _clock(self, x: Tensor) -> float:
        if x.is_cuda and self.sync_timing:
            torch.cuda.synchronize(x.device)  # time the collective, not its launch
        return time.perf_counter()


def build_context(alloc: VirtualAllocator, pool: KVPool, dcp: Axis, decisions: Decisions,
                  chunks: list[SeqChunk], v_dim: int, pad: int = 0, form: str = "auto") -> DCPContext:
    """The engine's one call per forward batch (chunks must already be allocated).

    decisions.attention_path: `auto` (paged when the pool is on CUDA), `paged` or `layout`;
    decisions.attention_backend: the paged path's --attention-backend (auto: the measured table);
    form: absorbed or MHA (auto: attention/form.py's rule per batch)."""
    backend, base = decisions.dcp_comm_backend, decisions.lse_base
    if selector.resolve_path(decisions.attention_path, pool.kv.device) == "layout":
        return DCPContext(build_layout(alloc, chunks, dcp.rank, pool.kv.device, pad), pool, dcp, backend,
                          base, v_dim, attention_form=form, alloc=alloc)
    lay = build_paged(alloc, chunks, dcp.rank, alloc.page_tokens // alloc.dcp, pool.kv.device, pad)
    ctx = DCPContext(lay, pool, dcp, backend, base, v_dim,
                     attention_backend=decisions.attention_backend, attention_form=form, alloc=alloc)
    ctx.kv_bytes_hint = kv_rows(alloc, chunks, dcp.rank) * pool.kv.shape[-1] * pool.kv.element_size()
    return ctx


def kv_rows(alloc: VirtualAllocator, chunks: list[SeqChunk], rank: int) -> int:
    """Shard rows one layer attends (sum of local_len(end)): host ints only."""
    return local_len_sum((ch.start + ch.num_tokens for ch in chunks), rank, alloc.dcp)
