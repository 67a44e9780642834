"""The DCP AttentionContext: one per forward batch, built by the engine from allocator state.

Per MLA layer (`attend`):
  1. write the batch's new latent rows that this rank owns (owner(v) = v % c) into its pool;
  2. gather the DCP group's query heads (skipped when q_is_group or c = 1);
  3. local attention over this rank's shard: its cached prefix rows plus the batch's owned new
     rows, causal by global position;
  4. merge across the group with `ag_rs` or `a2a` exactly as the launch config decided.

Chunked prefill / extend attends the local shard and merges like decode (exact by the merge
identity), instead of gathering prefix shards to restore token order: one code path for prefill,
decode and verification.  T = 0 still runs every collective with empty tensors.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from dcpctl.runtime.attention.comm import exchange_a2a, exchange_ag_rs, gather_heads
from dcpctl.runtime.attention.local import attention_mask, local_attention
from dcpctl.runtime.kv.allocator import VirtualAllocator
from dcpctl.runtime.kv.pool import KVPool
from dcpctl.runtime.parallel import Axis

BACKENDS = ("ag_rs", "a2a")


@dataclass
class SeqChunk:
    """One request's tokens in a batch: positions [start, start + num_tokens) of request `rid`."""

    rid: int
    start: int
    num_tokens: int


@dataclass
class ShardLayout:
    """Index tensors of one batch on one DCP rank (T batch tokens, S shard rows attended)."""

    positions: Tensor     # [T] global position of every batch token
    seq: Tensor           # [T] batch-local sequence index
    write_rows: Tensor    # [N] batch rows this rank owns
    write_slots: Tensor   # [N] their physical slots
    kv_slots: Tensor      # [S] physical slots of the shard rows to attend
    kv_pos: Tensor        # [S] their global positions
    kv_seq: Tensor        # [S] their batch-local sequence index


def build_layout(alloc: VirtualAllocator, chunks: list[SeqChunk], dcp_rank: int,
                 device: torch.device | str = "cpu", pad: int = 0) -> ShardLayout:
    """Plain-int bookkeeping -> index tensors; identical inputs on every rank, own-rank outputs.

    `pad` dummy rows (position 0, sequence -1) go after the real tokens: they write nothing and
    see no key, so their output is exactly zero (all shards empty -> the merge returns zeros).
    """
    c = alloc.dcp
    cols: dict[str, list[int]] = {k: [] for k in ShardLayout.__dataclass_fields__}
    row = 0
    for i, ch in enumerate(chunks):
        slots = alloc.slots(ch.rid)
        end = ch.start + ch.num_tokens
        cols["positions"] += range(ch.start, end)
        cols["seq"] += [i] * ch.num_tokens
        for p in range(ch.start + (dcp_rank - ch.start) % c, end, c):
            cols["write_rows"].append(row + p - ch.start)
            cols["write_slots"].append(slots[p] // c)
        owned = range(dcp_rank, end, c)
        cols["kv_slots"] += [slots[p] // c for p in owned]
        cols["kv_pos"] += owned
        cols["kv_seq"] += [i] * len(owned)
        row += ch.num_tokens
    cols["positions"] += [0] * pad
    cols["seq"] += [-1] * pad
    return ShardLayout(**{k: torch.tensor(v, dtype=torch.int64, device=device) for k, v in cols.items()})


@dataclass
class DCPContext:
    """Implements attention.api.AttentionContext for one forward batch."""

    layout: ShardLayout
    pool: KVPool
    dcp: Axis
    backend: str          # decisions["dcp_comm_backend"]
    lse_base: str         # decisions["lse_base"]: base of the LSE local attention returns
    v_dim: int            # kv_lora_rank
    kv_bytes_read: int = 0
    _mask: Tensor | None = field(default=None, repr=False)

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

    def attend(self, layer: int, q: Tensor, kv_new: Tensor, scale: float, q_is_group: bool = False) -> Tensor:
        # q: [T, Hl, R] or [T, Hl*c, R] (q_is_group)  kv_new: [T, R] -> [T, Hl, L]
        lay = self.layout
        self.pool.write(layer, lay.write_slots, kv_new.index_select(0, lay.write_rows))
        kv = self.pool.read(layer, lay.kv_slots)
        self.kv_bytes_read += kv.numel() * kv.element_size()
        c = self.dcp.size
        q_group = q if (q_is_group or c == 1) else gather_heads(q, self.dcp)
        o, lse = local_attention(q_group, kv, self.mask(), scale, self.v_dim, self.lse_base)
        if c == 1:
            return o.to(q.dtype)
        if self.backend == "ag_rs":
            return exchange_ag_rs(o, lse, self.lse_base, self.dcp).to(q.dtype)
        return exchange_a2a(o, lse, self.lse_base, self.dcp, q.dtype).to(q.dtype)


def decision(decisions: dict, key: str, default: Any) -> Any:
    """A launch-config decision: a plain value, or the plan's {"value": ..., "reason": ...}."""
    value = (decisions or {}).get(key, default)
    return value.get("value", default) if isinstance(value, dict) else value


def build_context(alloc: VirtualAllocator, pool: KVPool, dcp: Axis, decisions: dict,
                  chunks: list[SeqChunk], v_dim: int, pad: int = 0) -> DCPContext:
    """The engine's one call per forward batch (chunks must already be allocated)."""
    layout = build_layout(alloc, chunks, dcp.rank, pool.kv.device, pad)
    backend = decision(decisions, "dcp_comm_backend", "ag_rs")
    return DCPContext(layout, pool, dcp, backend, str(decision(decisions, "lse_base", "e")), v_dim)
