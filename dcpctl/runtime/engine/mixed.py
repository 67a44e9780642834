"""Mixed steps beside the decode graphs: the decodes replay their captured graph, the prompt chunks run
eagerly; the rule for when a step splits (`Split`).

A mixed step (engine/scheduler.py: one token of every running decode plus prefill chunks) holds chunks of many
tokens, so it cannot replay a decode graph as a whole; run as one eager forward, every decode would lose its
graph whenever a prompt is prefilling.  With decode graphs and one attention-DP replica the engine splits it
instead:

  1. the decode rows (the one-token chunks of requests past their prefill) replay the graph of their batch
     size, exactly as a decode-only step does (pad rows write the trash slot); queued first, so the GPU runs
     the decodes while the host builds the prompt chunks' forward;
  2. the prompt chunks run as one eager forward of their own;
  3. the decode rows and every prompt chunk that reaches its sequence's end are sampled as one batch, decodes
     first as in the scheduler's batch; then the chunks advance and finished requests free their pages
     (Engine._accept).

The scheduler's batch is unchanged: it decides what runs, this rule decides how (`Split.splits`:
engine/batch.py's `graph+prefill` mode, which the model runner runs).  The step is not pipelined (a step in
flight is resolved first, Engine._schedule), so every input id is on the host.  Tokens equal one eager
forward's: each row attends only its own request's KV and the two parts write disjoint slots.  Where a step
cannot split it runs as one eager forward, said once: no decode graphs, attention DP above 1 (the replicas
would have to agree on a graph size every step), more decodes than the largest captured batch size.
"""
from __future__ import annotations

from dataclasses import dataclass

from dcpctl.runtime.notes import note_once

KIND = "graph+prefill"     # the step trace's name for a split step (server/loop.py, tools/serve_trace.py)
EAGER = "mixed steps: decodes and prompt chunks in one eager forward"


def split_off(graphs: bool, dp_size: int) -> str | None:
    """Why an engine (with decode graphs or not) runs every mixed step as one eager forward (None: it
    splits)."""
    if not graphs:
        return f"{EAGER} (no decode graphs on this engine)"
    if dp_size > 1:
        return (f"{EAGER} (attention DP {dp_size}: the replicas would have to agree on a graph size every "
                "step)")
    return None


@dataclass(frozen=True)
class Split:
    """Whether a mixed step splits: `off` (split_off's reason) or up to `apart` decodes (the largest captured
    batch size; 0 before the graphs are captured, when no graph step runs either)."""

    off: str | None
    apart: int

    def splits(self, decodes: int, chunks: int) -> bool:
        """Whether a step of `chunks` chunks, `decodes` of them decodes, splits (said once why not, where it
        is mixed and cannot)."""
        if not decodes or decodes == chunks:
            return False                     # no decode, or no prompt chunk: not a mixed step
        if self.off:
            note_once(self.off)
            return False
        if decodes > self.apart > 0:
            note_once(f"{EAGER} when it has more decodes than the largest captured batch size ({self.apart}; "
                      "raise --cuda-graph-max-bs-decode)")
        return 0 < decodes <= self.apart
