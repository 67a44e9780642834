"""FlashInfer's MLA paged decode as the absorbed `flashinfer` backend (its wrapper and plan: attention/flashinfer_mla.py).

prepare: the batch's plan inputs from the layout's host page lists (host ints, no device sync); run: plan() when
the batch is new, then the kernel over the pool's strided ckv/kpe views.  Decode only (one token per chunk).  A CUDA
graph cannot capture it: its plan() is host work every step and the graph buffers carry no host page lists.
"""
from __future__ import annotations

from dcpctl.runtime.attention import flashinfer_mla
from dcpctl.runtime.attention.backends.base import ABSORBED, Backend, Call, register
from dcpctl.runtime.attention.triton_mla import MLAOut

GRAPH_LAYOUT = "CUDA-graph replay: FlashInfer plans each step on the host and the graph buffers carry no host page lists"


def run(c: Call, batch: flashinfer_mla.Batch) -> MLAOut:
    return flashinfer_mla.decode(c.q, c.pool, batch, c.scale, c.v_dim, c.out)


BACKEND = register(Backend(
    "flashinfer", ABSORBED, blocker=lambda q, pool, v_dim: flashinfer_mla.blocker(pool, v_dim, q.dtype), run=run,
    prepare=lambda c: flashinfer_mla.prepare(c.q, c.pool, c.lay), graph=GRAPH_LAYOUT, one_token=True))
