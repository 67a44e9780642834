"""Host time of a graph decode step's phases, for the step trace (server/loop.py) and
tools/engine_overhead.py.

    timers = PhaseTimers(engine.runner)   # hooks a clock into the model runner (CUDA-graph engines only; else
                                          # timers.on is False and nothing is timed)
    timers.start()                   # before engine.step(): a new row of zeros
    engine.step()
    timers.rows[-1]                  # seconds in each of PHASES during that step
    timers.undo()                    # the runner runs without a clock again

The phases: the step's metadata (DecodeGraphs.prepare), the cudaGraphLaunch call (CUDAGraph.replay), the
sampling launches (pipeline.launch_sampling) and the previous step's resolve (its event wait and bookkeeping).
A phase that waits for the GPU (resolve, in a GPU-bound loop) shows the wait; the rest is the host's own work.
With replays=True (on CUDA) the clock also records CUDA events right around each graph launch, in launch
order: the replay's own GPU time.  The code that runs a phase calls the clock it is handed (`timed`); nothing
is patched. A debugging aid.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Protocol, TypeVar

PHASES = ("prepare", "graph_launch", "sampling", "resolve")
PREPARE, LAUNCH, SAMPLING, RESOLVE = range(len(PHASES))
T = TypeVar("T")


class StepClock:
    """Seconds per phase, one row per step (start() opens one), and the launches' CUDA events
    (replays=True)."""

    def __init__(self, replays: bool = False) -> None:
        self.rows: list[list[float]] = []
        self.replays: list[tuple[Any, Any]] | None = [] if replays else None

    def start(self) -> None:
        self.rows.append([0.0] * len(PHASES))

    def timed(self, phase: int, fn: Callable[..., T], *a: Any) -> T:
        if not self.rows:     # no step opened (a clock kept for its replays' events): nothing to add to
            return fn(*a)
        t = time.perf_counter()
        try:
            return fn(*a)
        finally:
            self.rows[-1][phase] += time.perf_counter() - t

    def launch(self, graph: Any) -> None:
        """graph.replay(), its host time under LAUNCH (and, replays=True, between two CUDA events)."""
        if self.replays is None:
            self.timed(LAUNCH, graph.replay)
            return
        import torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        self.timed(LAUNCH, graph.replay)
        end.record()
        self.replays.append((start, end))


def timed(clock: StepClock | None, phase: int, fn: Callable[..., T], *a: Any) -> T:
    """fn(*a), its host time added to `phase` when a clock is given."""
    return fn(*a) if clock is None else clock.timed(phase, fn, *a)


class Clocked(Protocol):
    """What a clock hooks into (the model runner): its decode graphs (None: none captured) and its clock."""

    graphs: Any
    clock: StepClock | None


class PhaseTimers(StepClock):
    """A clock hooked into a model runner until undo() (module docstring)."""

    def __init__(self, runner: Clocked, replays: bool = False) -> None:
        super().__init__(replays)
        self.on = runner.graphs is not None
        if self.on:
            runner.clock = self
        self._runner = runner

    def undo(self) -> None:
        if self._runner.clock is self:
            self._runner.clock = None
