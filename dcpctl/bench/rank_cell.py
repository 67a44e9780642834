"""One `bench rank` cell: the emulated rank's decode step (lm_head and sampling included) at B requests x L
cached positions, captured as the serving engine captures it, replayed and timed.

The KV pool is filled with random rows and the lengths are set directly (bench/decode_cell.py's setup_pool):
no prefill.  The graph is the serving engine's (engine/decode_graphs.py DecodeGraphs with logits; the only
place this bench builds one) over the context bucket a server with the plan's KV capacity would replay for L
(`bucket_pages`).  Each rep times `INNER` back-to-back replays with CUDA events (the GPU's step, as the graph
runs it; the host's part is the served loop's `host gap`, bench/rank_served.py); the stand-in collectives'
copies, recorded while the graph was captured, are timed alone on fresh buffers and subtracted.  Off CUDA the
same step runs eagerly (DecodeGraphs replays eagerly there) and its wall time is the step; no copy time is
told apart.
"""
from __future__ import annotations

import functools
import statistics
import time
from contextlib import contextmanager
from typing import Any, Iterator

import torch
from torch import Tensor

from dcpctl.bench.decode_cell import decode_ids, setup_pool
from dcpctl.runtime import collectives
from dcpctl.runtime.attention.layout import SeqChunk
from dcpctl.runtime.graph_capture import capture
from dcpctl.runtime.kv.allocator import local_len
from dcpctl.runtime.standin import answers

INNER = 5     # replays per timed rep


def rank_ids(batch: int, model: Any, device: torch.device) -> Tensor:
    """[batch] input ids inside this rank's vocabulary slice: under a stand-in group every peer's embedding
    rows are this rank's, so an id outside it would embed to zeros everywhere (a real step embeds every id
    somewhere)."""
    s = model.shards
    return s.vocab_start + decode_ids(batch, s.vocab_end - s.vocab_start, device)


def bucket_pages(ctx: int, top_rows: int, page: int, c: int, rank: int) -> int:
    """Block-table pages of the graph a server whose widest bucket is `top_rows` local rows replays for a step
    at position ctx (decode_graphs.context_buckets: the smallest bucket holding the request's local rows), and
    at least the request's own pages."""
    from dcpctl.runtime.engine.decode_graphs import context_buckets
    need = local_len(ctx + 1, rank, c)
    fits = [b for b in context_buckets(max(top_rows, need), page) if b >= need]
    return max(-(-fits[0] // page), -(-(ctx + 1) // (page * c)))


class Cell:
    """B requests at position `ctx` on this rank's pool, with one captured decode graph (eager off CUDA)."""

    def __init__(self, model: Any, decisions: Any, batch: int, ctx: int, page: int, top_rows: int,
                 ids: Tensor | None = None) -> None:
        from dcpctl.runtime.engine.decode_graphs import DecodeGraphs
        ps, self.device = model.ps, model.device
        c = ps.dcp.size
        self.alloc, self.pool = setup_pool(model, c, batch, ctx + 1, page, self.device, True)
        self.ids = rank_ids(batch, model, self.device) if ids is None else ids.to(self.device)
        self.chunks = [SeqChunk(r, ctx, 1) for r in range(batch)]
        self.cuda = self.device.type == "cuda"
        pages = bucket_pages(ctx, top_rows, page, c, ps.dcp.rank)
        with collectives.recording(collectives.axis_names(ps), captured_only=self.cuda) as calls:
            self.graphs = DecodeGraphs(model, self.alloc, self.pool, decisions, model.cfg.kv_lora_rank,
                                       [batch], pages, self.alloc.num_pages * page, logits=True)
            if not self.cuda:
                self.graphs.replay(self.ids, self.chunks)       # eager: record one step's calls
        self.calls: list[collectives.Call] = list(calls)
        self.bucket_rows = pages * page
        self.kernel = next(iter(self.graphs.kernels.values()), "")    # the local attention kernel it runs

    def times_us(self, reps: int) -> list[float]:
        """Per rep, the step's time in us: GPU time of INNER back-to-back replays (CUDA), else one eager
        step's wall."""
        g = self.graphs
        key = g.prepare(self.ids, self.chunks)
        graph = g.graphs[key].graph
        if graph is None:
            out = []
            for _ in range(reps + 1):
                t0 = time.perf_counter()
                g.replay(self.ids, self.chunks)
                out.append((time.perf_counter() - t0) * 1e6)
            return out[1:]
        return replay_us(graph.replay, reps, INNER)

    @functools.cached_property
    def standin_us(self) -> float:
        """GPU time of this step's stand-in answers alone (0 off CUDA); timed once per cell, which every
        routing it serves shares (the calls depend on the captured graph only)."""
        if not self.cuda:
            return 0.0
        work = answers(self.calls, self.device)
        if not work:
            return 0.0
        graph, _ = capture(lambda: [w() for w in work], None)    # one side-stream run, then the capture
        return statistics.median(replay_us(graph.replay, 7, INNER))

    def close(self) -> None:
        del self.graphs, self.pool


def replay_us(replay: Any, reps: int, inner: int) -> list[float]:
    """Per rep, the mean GPU time in us of `inner` back-to-back calls of replay() (one warm-up rep first)."""
    times = []
    for _ in range(reps + 1):
        a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(inner):
            replay()
        e.record()
        e.synchronize()
        times.append(a.elapsed_time(e) * 1e3 / inner)
    return times[1:]


@contextmanager
def without_layers(model: Any) -> Iterator[None]:
    """The model with no decoder layer (embedding, final norm, lm_head and sampling): a step's part outside
    its layers, which --layers does not scale."""
    layers, model.layers = model.layers, []
    try:
        yield
    finally:
        model.layers = layers


def aggregate(calls: list[collectives.Call]) -> list[dict[str, Any]]:
    """Calls per step by (kind, group, size, bytes), in first-seen order (the measured file's
    `collectives`)."""
    out: dict[tuple, dict[str, Any]] = {}
    for c in calls:
        key = (c.kind, c.group, c.size, c.nbytes)
        if key not in out:
            out[key] = {"kind": c.kind, "group": c.group, "group_size": c.size, "bytes": c.nbytes, "count": 0,
                        "shape": list(c.shape), "dtype": c.dtype}
        out[key]["count"] += 1
    return list(out.values())
