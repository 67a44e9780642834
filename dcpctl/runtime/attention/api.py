"""The one interface between model code and DCP attention.

The model computes, per MLA layer, the absorbed query and the new latent rows; the context (built
per forward batch by the engine) owns the KV pool, the DCP exchange and the merge.

    R = kv_lora_rank + qk_rope_head_dim     (latent row: normalized c_kv then rope'd k_pe)
    L = kv_lora_rank
"""
from __future__ import annotations

from typing import Protocol

from torch import Tensor


class AttentionContext(Protocol):
    positions: Tensor  # [T] int64 global position of every token of the batch (rope uses it)

    def attend(self, layer: int, q: Tensor, kv_new: Tensor | None, scale: float,
               q_is_group: bool = False) -> Tensor:
        """Causal MLA attention of this batch's tokens over their whole sequences.

        q: [T, H_local, R] (this rank's heads), or [T, H_local * dcp, R] with q_is_group=True (the
        DCP group's heads, computed locally under replicated Q projection; group order = dcp rank)
        kv_new: [T, R] latent rows of the batch's tokens (every rank passes all of them; the
        context keeps only owned rows); None when the model already wrote them where the context's optional
        `kv_destination(layer)` said (DCPContext: one fused kernel).  Returns o: [T, H_local, L] for this
        rank's heads.
        """
        ...

    # Optional (DCPContext): the MHA form for long prefills and extends.  A context without `use_mha` is
    # absorbed.
    #   use_mha(shape: MlaShape) -> bool       every chunk in the MHA form (decided per chunk, once per batch:
    #       form.py)
    #   split(shape) -> [(rows [Ti], sub-context, mha)] or None
    #       a mixed batch's absorbed then MHA sub-batches
    #   attend_mha(layer, q, kv_new, scale, w_kv, q_is_group=False) -> o [T, H_local, v]
    #       q: [T, H_local (or the group's), nope + rope] with rope applied; w_kv: [H_group, nope + v, L]
    #       kv_b_proj
