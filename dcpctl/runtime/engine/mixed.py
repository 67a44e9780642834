"""Mixed steps beside the decode graphs: the decodes replay their captured graph, the prompt chunks run eagerly.

A mixed step (engine/scheduler.py: one token of every running decode plus prefill chunks) holds chunks of many
tokens, so it cannot replay a decode graph as a whole; run as one eager forward, every decode would lose its graph
whenever a prompt is prefilling.  With decode graphs and one attention-DP replica the engine splits it instead:

  1. the decode rows (the one-token chunks of requests past their prefill) replay the graph of their batch size,
     exactly as a decode-only step does (pad rows write the trash slot); queued first, so the GPU runs the
     decodes while the host builds the prompt chunks' forward;
  2. the prompt chunks run as one eager forward of their own;
  3. the decode rows and every prompt chunk that reaches its sequence's end are sampled as one batch, decodes
     first as in the scheduler's batch; then the chunks advance and finished requests free their pages (engine._accept).

The scheduler's batch is unchanged: it decides what runs, this decides how.  The step is not pipelined (a step in
flight is resolved first, engine.step), so every input id is on the host.  Tokens equal one eager forward's: each
row attends only its own request's KV and the two parts write disjoint slots.  The step trace calls it
"graph+prefill".  Where a step cannot split it runs as one eager forward, said once: no decode graphs, attention
DP above 1 (the replicas would have to agree on a graph size every step), more decodes than the largest captured
batch size.
"""
from __future__ import annotations

from typing import Any

import torch

from dcpctl.runtime.attention.dcp import SeqChunk, kv_rows
from dcpctl.runtime.engine.events import Event
from dcpctl.runtime.notes import note_once

KIND = "graph+prefill"     # the step trace's name for a split step (server/loop.py, tools/serve_trace.py)
EAGER = "mixed steps: decodes and prompt chunks in one eager forward"


def split_off(graphs: Any, dp_size: int) -> str | None:
    """Why this engine runs every mixed step as one eager forward (None: it splits them)."""
    if graphs is None:
        return f"{EAGER} (no decode graphs on this engine)"
    if dp_size > 1:
        return f"{EAGER} (attention DP {dp_size}: the replicas would have to agree on a graph size every step)"
    return None


def apart(engine: Any) -> int:
    """The most decodes a mixed step replays as their own graph beside its prompt chunks (0: it does not split, as
    before the graphs are captured); the scheduler gives the chunks of such a step the whole budget
    (engine/scheduler.py)."""
    return 0 if engine.split_off or engine.graphs.graphs is None else engine.graphs.max_size


def parts(engine: Any, chunks: list[SeqChunk]) -> tuple[list[SeqChunk], list[SeqChunk]] | None:
    """(decode rows, prompt chunks) of a mixed step the engine splits; None for a step that is not mixed or cannot
    split (one eager forward; said once why)."""
    decode = [ch for ch in chunks if not engine.sched.seq(ch.rid).prefilling]
    if not decode or len(decode) == len(chunks):
        return None                      # no decode, or no prompt chunk: not a mixed step
    if engine.split_off:
        note_once(engine.split_off)
        return None
    g = engine.graphs
    if g.graphs is None:                 # not captured (warm_up): no graph step runs either
        return None
    if len(decode) > g.max_size:
        note_once(f"{EAGER} when it has more decodes than the largest captured batch size ({g.max_size}; raise "
                  "--cuda-graph-max-bs-decode)")
        return None
    return decode, [ch for ch in chunks if engine.sched.seq(ch.rid).prefilling]


def run(engine: Any, decode: list[SeqChunk], prefill: list[SeqChunk]) -> list[Event]:
    """One split step (module docstring); this replica's events, the decodes' first."""
    e = engine
    dseqs, pseqs = e.sched.seqs_of(decode), e.sched.seqs_of(prefill)   # looked up once for the step
    logits = e.graphs.run(e.input_ids(decode, dseqs), decode, None)   # [n, V]; a decode chunk always reaches its end
    e.kv_bytes_read += kv_rows(e.alloc, decode, e.ps.dcp.rank) * e.pool.nbytes_per_row()
    hidden = e.forward(prefill, e.input_ids(prefill, pseqs))
    picks = e.sched.samples(prefill, pseqs)
    if picks:                            # the graph's rows are a view of its output: cat copies them out
        logits = torch.cat([logits, e.pick_logits(hidden, picks)])
    seqs = dseqs + [e.sched.seq(rid) for _, rid in picks]
    e.sched.advance(decode + prefill, dseqs + pseqs)
    return e._accept(logits, seqs)
