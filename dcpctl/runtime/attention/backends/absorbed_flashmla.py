"""FlashMLA's dense paged decode (sm_90a, bf16, page 64) as the absorbed `flashmla` backend
(attention/flashmla.py).

prepare: each query row's block-table row and FlashMLA's tile-scheduler metadata (a device kernel, no host
sync). capture: a decode graph's batch reads the metadata from buffers kept outside the graph
(flashmla.GraphRows, under `kept["flashmla"]`): the capture's warm-up run makes them, the recording reads
them, and `refresh` remakes them before a replay only when a row's block count changed.  Decode only (one
token per chunk).  At DCP 1 the lse is not masked for empty rows (pads): DCPContext.attend reads only o there.
"""
from __future__ import annotations

from torch import Tensor

from dcpctl.runtime.attention import flashmla
from dcpctl.runtime.attention.backends.base import Absorbed, Call, register
from dcpctl.runtime.attention.triton_mla import MLAOut


class FlashMLA(Absorbed):
    name, label, one_token = "flashmla", "FlashMLA", True

    def blocker(self, q: Tensor, pool: Tensor, v_dim: int) -> str | None:
        return flashmla.blocker(pool, v_dim, q.dtype)

    def prepare(self, call: Call) -> flashmla.Batch:
        return flashmla.prepare(call.q, call.lay, call.dcp_size > 1)

    def capture(self, call: Call, kept: dict, recording: bool) -> flashmla.Batch:
        rows = kept.setdefault(self.name, flashmla.GraphRows(call.q.shape[1]))
        return flashmla.prepare(call.q, call.lay, call.dcp_size > 1, rows, recording)

    def refresh(self, kept: dict, host_lens: list[int], lens: Tensor) -> None:
        if self.name in kept:
            kept[self.name].refresh(host_lens, lens)

    def run(self, call: Call, state: flashmla.Batch) -> MLAOut:
        return flashmla.decode(call.q, call.pool, state, call.scale, call.v_dim, call.out)


BACKEND = register(FlashMLA())
