"""The torch reference as the absorbed kind's fallback: exact on any device and dtype, over the same block table.

It runs where no kernel can (a CPU pool, float64, a latent row too wide for ours) and for --attention-backend
torch_native, and says once why.
"""
from __future__ import annotations

from dcpctl.runtime.attention.backends.absorbed_triton import blocker as triton_blocker, launch
from dcpctl.runtime.attention.backends.base import ABSORBED, Backend, Call, register
from dcpctl.runtime.attention.triton_mla import MLAOut, mla_decode_reference
from dcpctl.runtime.notes import note_once


def run(c: Call, state: None) -> MLAOut:
    note_once(f"local attention: the torch reference over the block table (attention_path paged; "
              f"{triton_blocker(c.q, c.pool, c.v_dim) or 'asked for'})")
    return launch(mla_decode_reference, c)


BACKEND = register(Backend("torch", ABSORBED, lambda q, pool, v_dim: None, run, fallback=True))
