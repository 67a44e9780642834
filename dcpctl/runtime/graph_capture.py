"""CUDA graph capture, done one way for every captured piece: the decode step (engine/decode_graphs.py) and
each layer's MLP (models/mlp_graphs.py).

    pieces = capture_set(keys, make_run, device)     # {key: Captured}, largest key first, one memory pool
    out = pieces.pieces[key].replay()                 # the graph (CUDA) or the same call, eagerly (elsewhere)
    built = unless_out_of_memory(lambda: ...)         # None where a capture ran out of GPU memory

Each call runs once on a side stream before its capture (its kernels' first launch and Triton's compiles stay
outside the graph), then is captured into the set's pool.  The keys are captured in the order given, largest
first by the callers, so the smaller graphs reuse the largest one's memory.  Off CUDA nothing is captured and
a replay runs the same call on the same static buffers, so CPU tests check what the GPU replays.
"""
from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from typing import Any, Callable, Generic, Hashable, TypeVar

import torch

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
Progress = Callable[[int, int], None]


def capture(run: Callable[[], Any], pool: Any) -> tuple[torch.cuda.CUDAGraph, Any]:
    """(the graph of one call of run(), what the captured call returned): run() once on a side stream first,
    then captured into `pool`."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        out = run()
    return graph, out


class Captured:
    """One call over static buffers: captured on CUDA (`graph`), else run eagerly at each replay."""

    __slots__ = ("run", "graph", "out")

    def __init__(self, run: Callable[[], Any], pool: Any, cuda: bool) -> None:
        self.run = run
        self.graph, self.out = capture(run, pool) if cuda else (None, None)

    def replay(self) -> Any:
        """What the call returns (on CUDA the captured output buffers, rewritten by this replay)."""
        if self.graph is None:
            return self.run()
        self.graph.replay()
        return self.out


@dataclass
class CapturedSet(Generic[K]):
    pieces: dict[K, Captured]
    capture_s: float          # wall seconds of the captures (warm-up runs included)
    pool_bytes: int           # memory the set's pool added (measure=True on CUDA), else 0


def capture_set(keys: list[K], make_run: Callable[[K], Callable[[], Any]], device: torch.device,
                progress: Progress | None = None, measure: bool = False) -> CapturedSet[K]:
    """Capture make_run(key) for every key, in order, into one memory pool (module docstring).  measure: empty
    the allocator's cache first (a capture does) and report what the pool added."""
    cuda = device.type == "cuda"
    pool = torch.cuda.graph_pool_handle() if cuda else None
    t0 = time.perf_counter()
    if cuda and measure:
        torch.cuda.empty_cache()
    before = torch.cuda.memory_reserved(device) if cuda and measure else 0
    pieces: dict[K, Captured] = {}
    for i, key in enumerate(keys):
        pieces[key] = Captured(make_run(key), pool, cuda)
        if progress is not None:
            progress(i + 1, len(keys))
    added = torch.cuda.memory_reserved(device) - before if cuda and measure else 0
    return CapturedSet(pieces, time.perf_counter() - t0, added)


def unless_out_of_memory(build: Callable[[], T]) -> T | None:
    """build(), or None where it ran out of GPU memory (what it had built freed before returning)."""
    built = None
    try:
        built = build()
    except torch.cuda.OutOfMemoryError:
        pass
    if built is None:     # out of the except: its traceback no longer holds the half-built pieces
        gc.collect()
        torch.cuda.empty_cache()
    return built
