"""FlashInfer's MLA paged decode as the absorbed `flashinfer` backend (its wrapper and plan:
attention/flashinfer_mla.py).

prepare: the batch's plan inputs from the layout's host page lists (host ints, no device sync); run: plan()
when the batch is new, then the kernel over the pool's strided ckv/kpe views.  Decode only (one token per
chunk).  A CUDA graph cannot capture it: its plan() is host work every step and the graph buffers carry no
host page lists.
"""
from __future__ import annotations

from torch import Tensor

from dcpctl.runtime.attention import flashinfer_mla
from dcpctl.runtime.attention.backends.base import Absorbed, Call, register
from dcpctl.runtime.attention.triton_mla import MLAOut

GRAPH_LAYOUT = ("CUDA-graph replay: FlashInfer plans each step on the host and the graph buffers carry no "
                "host page lists")


class FlashInfer(Absorbed):
    name, label, graph, one_token = "flashinfer", "FlashInfer", GRAPH_LAYOUT, True

    def blocker(self, q: Tensor, pool: Tensor, v_dim: int) -> str | None:
        return flashinfer_mla.blocker(pool, v_dim, q.dtype)

    def prepare(self, call: Call) -> flashinfer_mla.Batch:
        return flashinfer_mla.prepare(call.q, call.pool, call.lay)

    def run(self, call: Call, state: flashinfer_mla.Batch) -> MLAOut:
        return flashinfer_mla.decode(call.q, call.pool, state, call.scale, call.v_dim, call.out)


BACKEND = register(FlashInfer())
