"""Small work a captured decode step runs beside the main stream (the `overlap` fusion, fusions.py).

    side = SideStream(x, fuse.overlap)     # on only while a CUDA graph is being captured on x's device
    with side.fork():                      # this block runs on the side stream, after what main has queued
        kv_rows_into(...)
    ...                                    # main goes on (the q_b GEMM)
    side.join()                            # main waits for the side stream before it reads what it wrote

In a graph a fork and a join are two edges, with no host cost; eager steps would pay an event record and a
wait per fork, so outside a capture both are no-ops and the block runs on the main stream.  What runs on the
side in the decode step: the rope angles (cos/sin, 4 small kernels) while the first layer's norm and
projection GEMM run, each layer's fused KV write (norm + rope + pool write) while its q_b GEMM runs, and its
query rope while the w_kc bmm runs.  Each reads only tensors main wrote before the fork or the side stream
wrote before it (cos/sin), and writes only what main reads after a join (the rope and the bmm write disjoint
slices of one query buffer).
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import Tensor

_STREAMS: dict[torch.device, "torch.cuda.Stream"] = {}


def _side(device: torch.device) -> "torch.cuda.Stream":
    s = _STREAMS.get(device)
    if s is None:
        s = _STREAMS[device] = torch.cuda.Stream(device)
    return s


class SideStream:
    """One forward's side stream: forks while a CUDA graph is captured on x's device, else no-ops."""

    def __init__(self, x: Tensor, on: bool = True):
        self.on = bool(on) and x.is_cuda and torch.cuda.is_current_stream_capturing()
        self.device = x.device
        self.pending = False

    @contextlib.contextmanager
    def fork(self) -> Iterator[None]:
        if not self.on:
            yield
            return
        side = _side(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            yield
        self.pending = True

    def join(self) -> None:
        if self.pending:
            torch.cuda.current_stream(self.device).wait_stream(_side(self.device))
            self.pending = False
