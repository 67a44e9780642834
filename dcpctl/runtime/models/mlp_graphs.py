"""CUDA graphs of each layer's MLP at token buckets: the captured pieces of an eager forward (prefill, extend,
the prompt chunks of a mixed step).

An eager forward launches a few hundred kernels a layer from the host, and below a few thousand tokens the
host, not the GPU, sets its pace (benchmarks/prefill_ttft.py --profile on serve_peers.py's 16-layer MoE
checkpoint), and a mixed step's prompt chunk costs the decodes beside it that much.  SGLang 0.5.23 captures
prefill too, by default on CUDA: its `breakable` prefill CUDA graph
(sglang/srt/model_executor/cuda_graph_config.py default_prefill_backend) captures the layer stack in segments
at token buckets (arg_groups/cuda_graph_hook.py generate_prefill_cuda_graph_batch_sizes, up to min(8192,
--chunked-prefill-size) for MLA models: arg_groups/memory_hook.py) and runs attention between them.  Here the
captured segment is each layer's MLP, where most of a MoE layer's launches are (the router's top-k, the sort
by expert, the grouped GEMMs, the combine, the shared expert): it has no collective (the model all-reduces its
partial sum) and no host sync.  Attention, the norms and the collectives stay eager between the pieces.

A call of T tokens (0 < T <= the largest bucket) copies x into the first T rows of the static input, writes T
to `valid`, replays the piece of the smallest bucket >= T and returns a copy of the output's first T rows; a
call of up to MAX_PASSES times the largest bucket runs as passes of it (the MLP is per token: each pass's rows
are the call's), a longer one eagerly (its own kernels at its own size).  Padded rows
hold earlier rows (finite); a MoE routes none of them to an expert (MoE's `valid`), a dense MLP computes and
drops them.  Buffers: one static input and one output [largest bucket, D], shared by every piece; one memory
pool (the pieces replay one at a time, in layer order).  Off CUDA (tests) a replay runs the same piece eagerly
on the same buffers, so CPU tests check the padding and the mask the GPU replays (runtime/graph_capture.py
captures them, as it captures the decode graphs).
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor

from dcpctl.runtime.graph_capture import Progress, capture_set
from dcpctl.runtime.models.mlp import MoE

# A call past the largest bucket replays in at most this many passes; a longer one runs eagerly.  A
# pass-limited block-FP8 MoE stops its pieces where its experts stop running grouped: past that, more grouped
# passes lose to the eager call's per-expert GEMMs (w8a16, 512-token pieces on the H200,
# benchmarks/data/fp8_prefill_passes_h200.json, one prompt of N tokens, ms: in passes 15.5 / 28.8 / 56.1 /
# 115.0 at N = 1,000 / 2,000 / 4,096 / 8,192, eager 19.7 / 22.6 / 32.0 / 70.3); other models' pieces reach
# the prefill chunk size, so their calls rarely pass it
MAX_PASSES = 2


def why_not(model: Any) -> str | None:
    """Why this model's MLPs cannot be captured (a clause), or None."""
    mlps = [layer.mlp for layer in getattr(model, "layers", [])]
    if not mlps:
        return "the model has no layers with an MLP"
    for m in mlps:
        if isinstance(m, MoE) and m.experts and m.stacked is None and model.device.type == "cuda":
            return "the routed experts run one GEMM chain per expert here (a host sync per pass)"
    return None


def token_cap(model: Any) -> int | None:
    """The most tokens a piece may hold, or None for no cap: a MoE whose grouped GEMMs stop at some pass size
    (block-FP8: mlp.MoE.grouped_cap; past it one GEMM chain per expert, a host sync) caps every piece
    there."""
    caps = [c for layer in getattr(model, "layers", []) if isinstance(layer.mlp, MoE)
            and (c := layer.mlp.grouped_cap()) is not None]
    return min(caps) if caps else None


class MlpGraphs:
    """Each layer's MLP captured at `buckets` token counts (module docstring)."""

    def __init__(self, model: Any, buckets: list[int], progress: Progress | None = None) -> None:
        self.model, self.buckets = model, sorted(set(buckets))
        self.cuda = model.device.type == "cuda"
        top, dim = self.buckets[-1], model.cfg.hidden_size
        self.inp = torch.zeros(top, dim, dtype=model.dtype, device=model.device)
        self.out = torch.zeros(top, dim, dtype=model.dtype, device=model.device)
        self.valid = torch.zeros((), dtype=torch.int64, device=model.device)
        self.index = {id(layer.mlp): i for i, layer in enumerate(model.layers)}
        self.replays = 0
        keys = [(i, b) for b in reversed(self.buckets) for i in range(len(model.layers))]   # largest first
        done = capture_set(keys, self._to_capture, model.device, progress, measure=True)
        self.graphs, self.capture_s, self.pool_bytes = done.pieces, done.capture_s, done.pool_bytes

    def _to_capture(self, key: tuple[int, int]) -> Callable[[], None]:
        self.valid.fill_(key[1])     # every row real while captured (outside the graph: a replay sets it)
        return lambda: self._piece(*key)

    def _piece(self, layer: int, b: int) -> None:
        mlp = self.model.layers[layer].mlp
        x = self.inp[:b]
        y = mlp(x, self.valid) if isinstance(mlp, MoE) else mlp(x)
        self.out[:b].copy_(y)

    def bucket(self, t: int) -> int | None:
        """The smallest bucket >= t, or None (t is past the largest)."""
        return next((b for b in self.buckets if b >= t), None)

    def __call__(self, mlp: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
        # x: [T, D] -> mlp(x) [T, D]: a replay where T fits a bucket; past the largest, up to MAX_PASSES
        # passes of the largest (a block-FP8 MoE's pieces stop at its grouped pass limit); else eager
        t, layer = x.shape[0], self.index.get(id(mlp))
        if not t or layer is None or (self.cuda and torch.cuda.is_current_stream_capturing()):
            return mlp(x)
        top = self.buckets[-1]
        if t <= top:
            return self._replay(layer, x).clone()
        if t > top * MAX_PASSES:
            return mlp(x)
        out = torch.empty_like(x)
        for i in range(0, t, top):
            out[i:i + top] = self._replay(layer, x[i:i + top])
        return out

    def _replay(self, layer: int, x: Tensor) -> Tensor:
        # x: [t, D], t <= the largest bucket -> a view of the output's first t rows (valid until the next
        # replay)
        t = x.shape[0]
        b = self.bucket(t)
        self.inp[:t].copy_(x)
        self.valid.fill_(t)
        self.graphs[(layer, b)].replay()
        self.replays += 1
        return self.out[:t]
