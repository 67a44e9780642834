"""Every rank's serving loop: receive the step's control message, apply it, step in lockstep.

    rank 0:  msg = bridge.take(wait=idle)  -> broadcast -> apply -> step -> gather events -> deliver
    others:                                   broadcast -> apply -> step -> gather events

When nothing is queued or running rank 0 waits on its inbox for IDLE_WAIT_S and then broadcasts an
empty message (the heartbeat), so the other ranks block inside the broadcast instead of spinning.
A shutdown message cancels every request, checks that every KV page is free again, and returns.

With $DCPCTL_STEP_TRACE set to a file, rank 0 records every loop turn (perf_counter times of take, step start,
step end, delivered; the step's kind, chunks and tokens; events; the host seconds of a graph step's phases,
engine/phases.py; on CUDA the graph replay's GPU time, from CUDA events right around graph.replay()) in memory
and writes them there as JSON when the loop ends: where a served step's time goes between the engine and the
HTTP side (tools/serve_trace.py reads it). A debugging aid: the rows grow with the run. With
$DCPCTL_LOOP_PROFILE set to a file, rank 0's loop runs under cProfile and its stats go there (pstats format)
when the loop ends: which host work a served step spends (cProfile's own cost inflates Python-heavy code, so
compare shares, not times).
"""
from __future__ import annotations

import json
import time
from typing import Any, Callable

from dcpctl import knobs
from dcpctl.runtime.engine.engine import Engine
from dcpctl.runtime.engine.events import Event, ReplicaStats, gather_to_rank0
from dcpctl.runtime.engine.phases import PhaseTimers
from dcpctl.runtime.engine.scheduler import SchedulerError
from dcpctl.runtime.server.bridge import Bridge
from dcpctl.runtime.server.control import Control, broadcast_control

OnStep = Callable[[list[Event], list[ReplicaStats], float], None]
TRACE_ENV = "DCPCTL_STEP_TRACE"
PROFILE_ENV = "DCPCTL_LOOP_PROFILE"
TRACE_FIELDS = ["take", "step", "stepped", "delivered", "kind", "chunks", "tokens", "events", "prepare_s",
                "graph_launch_s", "sampling_s", "resolve_s", "gpu_ms", "gpu_gap_ms"]


def apply(engine: Engine, msg: Control) -> list[Event]:
    """Cancel, then queue; a request the scheduler refuses ends at once with finish "abort"
    (every rank of its replica refuses it alike, so lockstep holds; the server validated it first).
    A request cancelled in the same message as it arrives (its client left before the engine saw it)
    is never queued: cancelling first and queueing it after would run it for nobody."""
    for rid in msg.cancel:
        engine.cancel(rid)
    gone = set(msg.cancel)
    refused = []
    for req in msg.new:
        if req.rid in gone:
            continue
        try:
            engine.submit(req.rid, req.prompt, req.params)
        except SchedulerError:
            refused.append(Event(req.rid, -1, 0.0, "abort"))
    return refused


def run_loop(engine: Engine, group: Any, bridge: Bridge | None, on_step: OnStep | None = None) -> int:
    """Run until rank 0 broadcasts shutdown; returns the number of steps that ran a batch."""
    world = engine.ps.world_size
    steps = 0
    trace_to = knobs.get(TRACE_ENV) if bridge is not None else None
    trace: list[tuple] = []
    phases = PhaseTimers(engine.runner, replays=True) if trace_to else None   # CUDA events around each replay
    gpu = phases.replays if phases is not None else []
    profile_to = knobs.get(PROFILE_ENV) if bridge is not None else None
    prof = None
    if profile_to:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    try:
        while True:
            t_take = time.perf_counter()
            msg = bridge.take(wait=not engine.busy) if bridge is not None else None
            msg = broadcast_control(msg, group)
            refused = apply(engine, msg)
            if msg.shutdown:
                break
            if phases is not None:
                phases.start()
            t0 = time.perf_counter()
            events = refused + engine.step()
            t_step = time.perf_counter()
            steps += engine.busy
            if engine.dp_size > 1:
                all_events, stats = gather_to_rank0(events if engine.ps.attn_tp.rank == 0 else [],
                                                    engine.stats(), group, world)
            else:
                all_events, stats = events, [engine.stats()] * world
            if bridge is not None:
                bridge.deliver(all_events)
                if on_step is not None:
                    on_step(all_events, stats, time.perf_counter() - t0 if engine.busy else 0.0)
            if trace_to:
                kind, chunks = engine.last_step
                trace.append((t_take, t0, t_step, time.perf_counter(), kind, len(chunks),
                              sum(ch.num_tokens for ch in chunks), len(events), *phases.rows[-1], len(gpu)))
    finally:
        if phases is not None:
            phases.undo()
        if prof is not None:
            prof.disable()
            prof.dump_stats(profile_to)
        if trace_to:
            _write_trace(trace_to, trace, gpu)
    engine.cancel_all()
    engine.check_drained()
    return steps


def _write_trace(path: str, trace: list, gpu: list[tuple[Any, Any]]) -> None:
    """Rows with each graph step's replay GPU time and the GPU time since the previous replay ended."""
    import torch
    if gpu and torch.cuda.is_available():
        torch.cuda.synchronize()
    rows, before, prev = [], 0, None       # replays seen before this row; the last replay's end event
    for *head, seen in trace:
        ms = gap = None
        if seen > before:                   # this step replayed graph number seen - 1
            start, end = gpu[seen - 1]
            ms = start.elapsed_time(end)
            gap = prev.elapsed_time(start) if prev is not None else None
            prev = end
        before = seen
        rows.append((*head, ms, gap))
    with open(path, "w") as f:
        json.dump({"fields": TRACE_FIELDS, "rows": rows}, f)
