"""Pipelined decode: the next step is queued on the GPU before the host reads this step's tokens.

Without it every decode step ends in a device-to-host copy of the sampled ids, and the GPU idles while
the host records them, streams them, schedules and prepares the next step.  With it (graph steps whose
requests are all greedy, one attention-DP replica, no speculative decoding), step n:

  1. schedules as usual: a request whose token of step n - 1 is still on the device feeds a placeholder
     (PENDING) there, and the graph reads the real id from step n - 1's argmax row (graphs.prepare's src);
  2. replays the graph (the model runner's `graph+pipelined` mode), which also takes each row's argmax and its
     log-probability (engine/decode_graphs.py); the engine's accept starts their copy to a pinned host buffer
     and records an event, and appends a placeholder per sampled request (a request whose placeholders reach
     max_new_tokens stops being scheduled: `draining`);
  3. then resolves step n - 1 (the GPU is busy with step n by now): real ids replace its placeholders, EOS
     and max_new_tokens finish requests as usual, its events are returned.

`Pipeline` holds the one step in flight: `sources` (the next step's src rows), `push` (steps 2 and 3), `read`.

A request that ends with EOS at step n - 1 was already scheduled in step n: that row's token is dropped
(its KV write lands in the request's own pages, freed after step n is queued, so the stream orders any
reuse after it).  Tokens reach the server one step later; TTFT is unchanged (the first token comes from
an eager prefill step).  Any other step first resolves what is in flight, then runs as before.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor

from dcpctl.runtime.attention.layout import SeqChunk
from dcpctl.runtime.engine.events import Event
from dcpctl.runtime.engine.phases import RESOLVE, SAMPLING, StepClock, timed
from dcpctl.runtime.engine.request import Sequence

PENDING = -1   # a placeholder token id: the real one is still on the device


@dataclass
class InFlight:
    """One queued decode step whose sampled ids the host has not read yet."""

    seqs: list[Sequence]         # the sampled requests, in row order of `host`
    slots: list[int]             # the placeholder's index in each seq.output
    rows: list[int]              # each one's row in the graph step (its argmax row: the next step's src)
    host: Tensor                 # [n, 2] (id, logprob) rows being copied to (pinned) host memory
    event: Any                   # a CUDA event after the copy, or None off CUDA

    def row_of(self) -> dict[int, int]:
        """rid -> the graph row holding its argmax."""
        return {s.rid: r for s, r in zip(self.seqs, self.rows)}


def launch_sampling(both: Tensor, seqs: list[Sequence], rows: list[int]) -> InFlight:
    """both: [n, 2] (argmax id as a float, its log-probability) on the device for the graph rows `rows`, one
    per seq: their host copy started, an event after it; placeholders appended."""
    event = None
    if both.is_cuda:
        host = torch.empty(both.shape, dtype=both.dtype, pin_memory=True)
        host.copy_(both, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
    else:
        host = both.clone()
    slots = []
    for s in seqs:
        slots.append(len(s.output))
        s.output.append(PENDING)
        s.logprobs.append(0.0)
        s.draining = len(s.output) >= s.params.max_new_tokens
    return InFlight(seqs, slots, rows, host, event)


def resolve(inf: InFlight, stop_reason: Callable[[Sequence, int], str],
            finish: Callable[[Sequence], None]) -> list[Event]:
    """Read a step's ids, fill its placeholders, finish what ended (EOS drops later placeholders)."""
    if inf.event is not None:
        inf.event.synchronize()
    toks, lps = inf.host.t().tolist()
    events = []
    for seq, k, tok, lp in zip(inf.seqs, inf.slots, toks, lps):
        if seq.finished:          # cancelled, or ended by EOS at an earlier step: this row was a spare
            continue
        tok = int(tok)
        seq.output[k], seq.logprobs[k] = tok, lp
        reason = stop_reason(seq, k)           # the engine's rule, at the placeholder's index
        if reason == "stop":                   # EOS: the placeholders after it were spare rows
            del seq.output[k + 1:], seq.logprobs[k + 1:]
            seq.computed = min(seq.computed, seq.num_tokens - 1)
        seq.finish_reason = reason
        if reason:
            finish(seq)
        events.append(Event(seq.rid, tok, lp, reason))
    return events


class Pipeline:
    """The engine's step in flight, if any (module docstring); stop_reason and finish are the engine's
    rules."""

    def __init__(self, stop_reason: Callable[[Sequence, int], str],
                 finish: Callable[[Sequence], None]) -> None:
        self.stop_reason, self.finish = stop_reason, finish
        self.step: InFlight | None = None

    def sources(self, chunks: list[SeqChunk], seqs: list[Sequence]) -> list[int] | None:
        """Per chunk (of sequence seqs[i]), the graph row of the step in flight whose argmax is its input id
        (-1: its id is on the host); None when no step is in flight."""
        if self.step is None:
            return None
        rows = self.step.row_of()
        src = []
        for ch, seq in zip(chunks, seqs):
            pending = seq.token(ch.start) == PENDING
            if pending and ch.rid not in rows:
                raise RuntimeError(f"request {ch.rid}: its input token is pending but not in the step in "
                                   "flight")
            src.append(rows[ch.rid] if pending else -1)
        return src

    def push(self, both: Tensor, seqs: list[Sequence], rows: list[int],
             clock: StepClock | None) -> list[Event]:
        """Put a replayed step in flight (launch_sampling), then read the one before it: that one's events."""
        new = timed(clock, SAMPLING, launch_sampling, both, seqs, rows)
        events = self.read(clock)
        self.step = new
        return events

    def read(self, clock: StepClock | None = None) -> list[Event]:
        """Resolve the step in flight (waiting for its copy): its events; [] when none is in flight."""
        if self.step is None:
            return []
        inf, self.step = self.step, None
        return timed(clock, RESOLVE, resolve, inf, self.stop_reason, self.finish)

    def drop(self) -> None:
        """Forget the step in flight once its copy is done (its tokens go with their cancelled requests)."""
        if self.step is not None and self.step.event is not None:
            self.step.event.synchronize()
        self.step = None
