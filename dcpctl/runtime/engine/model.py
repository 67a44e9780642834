"""What the engine needs of a model (DeepseekModel, KimiLinearModel, test fakes): a typed protocol."""
from __future__ import annotations

from typing import Any, Protocol

from torch import Tensor


class MLADims(Protocol):
    num_layers: int
    kv_lora_rank: int
    qk_rope_head_dim: int


class StatePool(Protocol):
    """Request-indexed state of a hybrid model (models/kda_state.KdaStatePool)."""

    slots: int
    used: int
    free: int

    def can_admit(self) -> bool: ...
    def admit(self, rid: int) -> None: ...
    def release(self, rid: int) -> None: ...
    def check_integrity(self) -> None: ...


class ServedModel(Protocol):
    cfg: MLADims
    kv_layers: int                  # KV-pool layers the model addresses (hybrids: only the MLA layers)
    kda_pool: StatePool | None      # hybrids: request-indexed KDA state, never striped; else None

    def forward(self, input_ids: Tensor, positions: Tensor, ctx: Any) -> Tensor: ...  # [T] -> hidden [T, D]
    def logits(self, hidden: Tensor) -> Tensor: ...                                    # [N, D] -> [N, V]


def latent_dims(model: ServedModel) -> tuple[int, int, int]:
    """(KV-pool layers, kv_lora_rank, latent row size R)."""
    cfg = model.cfg
    return model.kv_layers, cfg.kv_lora_rank, cfg.kv_lora_rank + cfg.qk_rope_head_dim


def state_pool(model: ServedModel, max_running: int | None) -> StatePool | None:
    """The model's request-state pool, resized to `max_running` slots when a cap is given (hybrids)."""
    pool = model.kda_pool
    if pool is not None and max_running and pool.slots != max_running:
        model.set_kda_capacity(max_running)  # type: ignore[attr-defined]  # hybrids only
        pool = model.kda_pool
    return pool
