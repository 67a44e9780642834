"""Host time of a graph decode step's phases, for the step trace (server/loop.py) and tools/engine_overhead.py.

    timers = PhaseTimers(engine)     # wraps the phases in place (CUDA-graph engines only; else timers.on is False)
    timers.start()                   # before engine.step(): a new row of zeros
    engine.step()
    timers.rows[-1]                  # seconds in each of PHASES during that step
    timers.undo()

The phases: the step's metadata (DecodeGraphs.prepare), the cudaGraphLaunch call (CUDAGraph.replay), the sampling
launches (pipeline.launch_sampling) and the previous step's resolve (its event wait and bookkeeping).  A phase that
waits for the GPU (resolve, in a GPU-bound loop) shows the wait; the rest is the host's own work.  A debugging aid.
"""
from __future__ import annotations

import time
from typing import Any, Callable

PHASES = ("prepare", "graph_launch", "sampling", "resolve")


class PhaseTimers:
    def __init__(self, engine: Any) -> None:
        import torch

        from dcpctl.runtime.engine import engine as engine_mod
        self.rows: list[list[float]] = []
        g = engine.graphs.graphs if engine.graphs is not None else None
        self.on = g is not None
        if not self.on:
            self.undo = lambda: None
            return
        prepare, sampling, resolve = g.prepare, engine_mod.launch_sampling, engine._resolve
        replay = torch.cuda.CUDAGraph.replay
        g.prepare = self._wrap(0, prepare)
        engine_mod.launch_sampling = self._wrap(2, sampling)
        engine._resolve = self._wrap(3, resolve)
        torch.cuda.CUDAGraph.replay = self._wrap(1, replay)

        def undo() -> None:
            del g.prepare, engine._resolve
            engine_mod.launch_sampling = sampling
            torch.cuda.CUDAGraph.replay = replay
        self.undo = undo

    def start(self) -> None:
        self.rows.append([0.0] * len(PHASES))

    def _wrap(self, i: int, fn: Callable) -> Callable:
        def timed(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                if self.rows:
                    self.rows[-1][i] += time.perf_counter() - t
        return timed
