"""FlashMLA's dense paged decode (sm_90a, bf16, page 64) as the absorbed `flashmla` backend (attention/flashmla.py).

prepare: each query row's block-table row and FlashMLA's tile-scheduler metadata (a device kernel, no host sync).
A decode graph captures prepare and run but reads the metadata from buffers that `refresh` remakes before a replay
only when a row's block count changed (flashmla.GraphRows).  Decode only
(one token per chunk).  At DCP 1 the lse is not masked for empty rows (pads): DCPContext.attend reads only o there.
"""
from __future__ import annotations

from dcpctl.runtime.attention import flashmla
from dcpctl.runtime.attention.backends.base import ABSORBED, Backend, Call, register
from dcpctl.runtime.attention.triton_mla import MLAOut


def run(c: Call, batch: tuple) -> MLAOut:
    return flashmla.decode(c.q, c.pool, batch, c.scale, c.v_dim, c.out)


BACKEND = register(Backend(
    "flashmla", ABSORBED, blocker=lambda q, pool, v_dim: flashmla.blocker(pool, v_dim, q.dtype), run=run,
    prepare=lambda c: flashmla.prepare(c.q, c.lay, c.dcp_size > 1), one_token=True,
    refresh=flashmla.GraphRows.refresh))
