"""CUDA-graph decode in the serving engine: which steps replay a graph, and the warm-up before ready.

The launch config's `cuda_graph.batch_sizes` (dcpctl/launch/cuda_graphs.py: SGLang's decode buckets up
to --cuda-graph-max-bs-decode, or --cuda-graph-bs-decode, or [] with --disable-cuda-graph / on CPU) says what to
capture.  A step replays a graph when every chunk in it is one token (decode, or a prompt's last
single-token chunk) and the batch fits the largest size; the batch is padded up to the next captured
size.  Under attention DP the replicas agree on the size first (engine._agree).  A mixed step's decodes
replay their graph beside an eager forward of its prompt chunks (engine/mixed.py).  What cannot replay
runs eagerly, with one note saying why; a graph never changes a token (the same kernels, the same
order of operations: tests/runtime/engine/test_engine_graphs.py).

Not captured, with their reason: speculative decoding's steps (draft + verify shapes per step), a
hybrid model's KDA layers (request-indexed recurrent state).
"""
from __future__ import annotations

import time
from typing import Any, Callable

from torch import Tensor

from dcpctl.runtime.attention.dcp import SeqChunk
from dcpctl.runtime.notes import note_once

Progress = Callable[[int, int], None]


def why_not(model: Any, spec: Any, sizes: list[int], state_pool: Any) -> str | None:
    """Why this engine replays no graph at all (None: it can)."""
    if not sizes:
        return None
    if state_pool is not None:
        return "cuda graphs: off (a hybrid model's KDA layers keep request-indexed state the graphs do not capture)"
    from dcpctl.runtime.models.deepseek import DeepseekModel
    if not isinstance(model, DeepseekModel):
        return f"cuda graphs: off ({type(model).__name__} has no capturable decode step)"
    if spec is not None:
        return "cuda graphs: off (speculative decoding's draft and verify steps run eagerly)"
    return None


def prefill_graphs_plan(model: Any, section: Any, device: Any) -> tuple[list[int], str] | None:
    """(token counts, reason) when this engine captures each layer's MLP for its eager forwards (warm_up; the
    launch config's cuda_graph.prefill_tokens), else None, said once why where the section asked for them."""
    tokens = list(section.prefill_tokens) if section is not None else []
    if not tokens:
        if section is not None and section.prefill_reason:
            note_once(section.prefill_reason)
        return None
    if device.type != "cuda":
        return None
    from dcpctl.runtime.models.deepseek import DeepseekModel
    from dcpctl.runtime.models.mlp_graphs import MAX_PASSES, token_cap, why_not as mlp_why_not
    why = None if type(model) is DeepseekModel else f"{type(model).__name__} has no captured MLP pieces"
    why = why or mlp_why_not(model)
    if why:
        note_once(f"prefill cuda graphs: off ({why})")
        return None
    cap = token_cap(model)
    if cap is not None and tokens[-1] > cap:
        tokens = [t for t in tokens if t <= cap]
        if not tokens:
            note_once(f"prefill cuda graphs: off (no token count up to {cap}, the grouped block-FP8 experts' limit)")
            return None
        return tokens, (f"{section.prefill_reason}; up to {cap} tokens here (the block-FP8 experts run grouped up "
                        f"to {cap} tokens a pass; a prompt chunk of up to {MAX_PASSES} x {tokens[-1]} tokens "
                        f"replays them in passes, a longer one runs its MLP eagerly)")
    return tokens, section.prefill_reason


class GraphDecode:
    """The engine's decode graphs: capture once, then replay per eligible step."""

    def __init__(self, engine: Any, sizes: list[int], reason: str) -> None:
        self.engine, self.sizes, self.reason = engine, sorted(sizes), reason
        self.graphs: Any = None
        self.capture_s = 0.0

    @property
    def max_size(self) -> int:
        return self.sizes[-1]

    def capture(self, progress: Progress | None = None) -> None:
        from dcpctl.runtime.attention.graphs import DecodeGraphs, kernel_summary
        e = self.engine
        t0 = time.perf_counter()
        self.graphs = DecodeGraphs(e.model, e.alloc, e.pool, e.decisions, e.v_dim, self.sizes,
                                   e.alloc.pages_for(e.alloc.virtual_capacity), e.trash_slot, logits=True,
                                   buckets=True, progress=progress)
        self.capture_s = time.perf_counter() - t0
        note_once(f"{self.reason}; {len(self.graphs.graphs)} graphs ({len(self.sizes)} batch sizes x "
                  f"{len(self.graphs.buckets)} context buckets) captured in {self.capture_s:.1f} s")
        if self.graphs.kernels:   # filled at capture (CUDA): the kernel each graph's shape picked
            note_once(f"decode attention kernel by context (tokens) and captured batch size: "
                      f"{kernel_summary(self.graphs.kernels, e.alloc.dcp)}")

    def eligible(self, chunks: list[SeqChunk]) -> int:
        """This replica's vote: its batch size when the step can replay (0 when idle), else -1."""
        if self.graphs is None:
            return -1 if chunks else 0
        if any(ch.num_tokens != 1 for ch in chunks):
            return -1
        if len(chunks) > self.max_size:
            note_once(f"cuda graphs: decode batches above the largest captured size ({self.max_size}) run "
                      "eagerly (raise --cuda-graph-max-bs-decode)")
            return -1
        return len(chunks)

    def run(self, ids: list[int], chunks: list[SeqChunk], size: int, src: list[int] | None = None) -> Tensor:
        """Logits [n, V] of one decode step (a view into the graph's output: read it before the next step)."""
        return self.graphs.replay(ids, chunks, size, src)

    def greedy(self, n: int) -> Tensor:
        """[n, 2]: the last replay's argmax (as a float) and its log-probability per row, on the device (a view:
        read it before the next replay)."""
        return self.graphs.sampled[:n]
