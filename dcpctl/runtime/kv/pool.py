"""Per-rank KV storage: one [num_layers, C, R] tensor of latent rows, indexed by physical slot."""
from __future__ import annotations

import torch
from torch import Tensor


class KVPool:
    """Physical rows of this rank only; the allocator decides which slots (owner-only writes)."""

    def __init__(self, num_layers: int, capacity: int, row_dim: int, dtype: torch.dtype,
                 device: torch.device | str = "cpu") -> None:
        self.kv = torch.zeros(num_layers, capacity, row_dim, dtype=dtype, device=device)
        self.descriptors: dict = {}   # the decode kernels' bulk-copy descriptors per layer view (triton_mla)

    @property
    def capacity(self) -> int:
        return self.kv.shape[1]

    def write(self, layer: int, slots: Tensor, rows: Tensor) -> None:
        # slots: [N] int64 physical   rows: [N, R]
        self.kv[layer].index_copy_(0, slots, rows.to(self.kv.dtype))

    def read(self, layer: int, slots: Tensor) -> Tensor:
        # slots: [N] int64 physical -> [N, R]
        return self.kv[layer].index_select(0, slots)

    def nbytes_per_row(self) -> int:
        return self.kv.shape[0] * self.kv.shape[2] * self.kv.element_size()
