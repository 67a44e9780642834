"""Request-indexed KDA state: one slot per running request, never striped by DCP.

    pool = KdaStatePool(max_requests, kda_layers, heads, head_dim, conv_kernel, dtype, state_dtype)
    pool.can_admit() -> bool;  pool.admit(rid) -> slot;  pool.release(rid);  pool.check_integrity()
    batch = pool.batch(chunks, num_tokens)   # once per forward: slots, spans and padding map

Per KDA layer and slot: the last conv_kernel - 1 inputs of the q/k/v short convolutions
(conv: [layers, slots, K-1, 3 * heads * head_dim], model dtype) and the recurrent state
(rec: [layers, slots, heads, head_dim, head_dim], fp32 or the float64 model's float64). `heads`
is this rank's attention-TP share. Every rank of a DCP group holds the same slots: DCP grows MLA
KV capacity but not this pool (docs/design.md section 5).

A chunk with start == 0 starts a fresh state (the slot's old contents are ignored); a later chunk
of the same request must start exactly where the state stopped, which `batch` checks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


class KdaPoolError(RuntimeError):
    """A KDA state slot misuse: full pool, unknown or duplicate request, broken bookkeeping."""


@dataclass
class KdaBatch:
    """One forward batch as n request spans padded to max_len steps (T rows incl. pad rows).

    | field  | shape | meaning                                                      |
    | ------ | ----- | ------------------------------------------------------------ |
    | slots  | n     | state slot of each span                                      |
    | fresh  | n     | span starts at position 0 (state begins at zero)             |
    | lens   | n     | tokens of each span                                          |
    | flat   | T'    | batch row r (r < T' = real rows) -> span * max_len + offset  |
    """

    slots: Tensor
    fresh: Tensor
    lens: Tensor
    flat: Tensor
    max_len: int
    num_tokens: int  # T: rows of the batch, pad rows included

    @property
    def num_spans(self) -> int:
        return int(self.slots.numel())


def batch_chunks(ctx: Any) -> list:
    """The batch's SeqChunks (rid, start, num_tokens) from the attention context, in token order."""
    chunks = getattr(getattr(ctx, "layout", None), "chunks", None)
    if chunks is None:
        chunks = getattr(ctx, "chunks", None)
    if chunks is None:
        raise TypeError(f"{type(ctx).__name__} carries no SeqChunks: hybrid (KDA) models need "
                        "ctx.layout.chunks or ctx.chunks to find each request's state")
    return list(chunks)


class KdaStatePool:
    def __init__(self, max_requests: int, kda_layers: int, heads: int, head_dim: int, conv_kernel: int,
                 dtype: torch.dtype, state_dtype: torch.dtype, device: torch.device | str = "cpu"):
        if max_requests < 1:
            raise KdaPoolError(f"max_requests ({max_requests}) must be at least 1")
        self.slots = max_requests
        width = 3 * heads * head_dim
        self.conv = torch.zeros(kda_layers, max_requests, conv_kernel - 1, width, dtype=dtype, device=device)
        self.rec = torch.zeros(kda_layers, max_requests, heads, head_dim, head_dim, dtype=state_dtype,
                               device=device)
        self._free: list[int] = list(range(max_requests))
        self._slot: dict[int, int] = {}  # rid -> slot
        self._seen: dict[int, int] = {}  # rid -> tokens folded into its state

    @property
    def used(self) -> int:
        return len(self._slot)

    @property
    def free(self) -> int:
        return len(self._free)

    def nbytes_per_request(self) -> int:
        per = lambda t: t[:, 0].numel() * t.element_size()  # noqa: E731
        return per(self.conv) + per(self.rec)

    def can_admit(self, n: int = 1) -> bool:
        return n <= len(self._free)

    def admit(self, rid: int) -> int:
        """Give request `rid` a state slot (lowest free: identical on every rank of the replica)."""
        if rid in self._slot:
            raise KdaPoolError(f"request {rid} is already admitted (slot {self._slot[rid]})")
        if not self._free:
            raise KdaPoolError(f"request {rid}: no free KDA state slot: used({self.used}) = "
                               f"slots({self.slots})")
        self._free.sort()
        slot = self._free.pop(0)
        self._slot[rid], self._seen[rid] = slot, 0
        return slot

    def release(self, rid: int) -> None:
        if rid not in self._slot:
            raise KdaPoolError(f"release of unknown request {rid}; admitted: {sorted(self._slot)}")
        self._free.append(self._slot.pop(rid))
        del self._seen[rid]

    def requests(self) -> list[int]:
        return list(self._slot)

    def check_integrity(self) -> None:
        """Raise KdaPoolError naming every term of the first broken invariant."""
        if self.free + self.used != self.slots:
            raise KdaPoolError(f"free({self.free}) + used({self.used}) != slots({self.slots})")
        distinct = set(self._free) | set(self._slot.values())
        if len(distinct) != self.slots or not distinct <= set(range(self.slots)):
            raise KdaPoolError(f"distinct_slots({len(distinct)}) != slots({self.slots}): "
                               "a slot is both free and used, used twice, or out of range")
        if set(self._seen) != set(self._slot):
            raise KdaPoolError(f"requests with a position ({sorted(self._seen)}) != admitted "
                               f"({sorted(self._slot)})")

    def batch(self, chunks: list, num_tokens: int) -> KdaBatch:
        """Index tensors of one forward batch; advances every span's request position."""
        slots, fresh, lens, flat = [], [], [], []
        longest = max((ch.num_tokens for ch in chunks), default=0)
        for i, ch in enumerate(chunks):
            slots.append(self._continue(ch, i, chunks))
            fresh.append(ch.start == 0)
            lens.append(ch.num_tokens)
            flat += range(i * longest, i * longest + ch.num_tokens)
        if len(flat) > num_tokens:
            raise KdaPoolError(f"chunk tokens ({len(flat)}) > batch rows ({num_tokens})")
        dev = self.rec.device
        i64 = lambda v: torch.tensor(v, dtype=torch.int64, device=dev)  # noqa: E731
        return KdaBatch(i64(slots), torch.tensor(fresh, dtype=torch.bool, device=dev), i64(lens), i64(flat),
                        longest, num_tokens)

    def _continue(self, ch: Any, i: int, chunks: list) -> int:
        if ch.rid not in self._slot:
            raise KdaPoolError(f"request {ch.rid} has no KDA state slot: admit it before its first chunk")
        if any(other.rid == ch.rid for other in chunks[:i]):
            raise KdaPoolError(f"request {ch.rid} appears twice in one batch")
        seen = self._seen[ch.rid]
        if ch.start not in (0, seen):
            raise KdaPoolError(f"request {ch.rid}: chunk starts at position {ch.start} but its KDA state "
                               f"holds {seen} tokens (only 0, a fresh start, or {seen} continue it)")
        self._seen[ch.rid] = ch.start + ch.num_tokens
        return self._slot[ch.rid]
