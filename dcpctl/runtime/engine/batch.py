"""What one engine step runs, as one plain value: the scheduler's chunks, how they run (the mode) and which
rows give a token.  Engine.step makes it (schedule), the model runner runs it (engine/model_runner.py), the
engine accepts the tokens.

The mode names are the step trace's kinds (server/loop.py, tools/serve_trace.py):

| mode              | what runs                                  | `rows` (row i gives `sampled[i]` a token) |
| ----------------- | ------------------------------------------ | ----------------------------------------- |
| `eager`           | one forward over every chunk               | of that forward                           |
| `graph`           | the decode graph of `size` (every chunk    | of the graph (row i = chunk i)            |
|                   | one token)                                 |                                           |
| `graph+pipelined` | the same; an input still on the device     | of the graph; read on the host one step   |
|                   | comes from the step in flight (`src`)      | later (engine/pipeline.py)                |
| `graph+prefill`   | a mixed step split (engine/mixed.py): the  | of the prompt chunks' forward (every      |
|                   | decodes' graph, then one forward of the    | decode row gives one too, first)          |
|                   | prompt chunks                              |                                           |
| `spec`            | draft proposals, then one verification     | of the prompt chunks, after the           |
|                   | forward the prompt chunks ride along       | verification rows                         |
|                   | (engine/spec.py)                           |                                           |
| `idle`, `resolve` | nothing: no replica has work, or only the  |                                           |
|                   | step in flight was read                    |                                           |
"""
from __future__ import annotations

from dataclasses import dataclass, field

from dcpctl.runtime.attention.layout import SeqChunk
from dcpctl.runtime.engine import mixed
from dcpctl.runtime.engine.request import Sequence

EAGER, GRAPH, PIPELINED, SPLIT, SPEC = "eager", "graph", "graph+pipelined", mixed.KIND, "spec"
IDLE, RESOLVE = "idle", "resolve"


@dataclass(frozen=True)
class Batch:
    """One step's work (module table); chunks in the scheduler's order, seqs[i] the sequence of chunks[i]."""

    mode: str
    chunks: list[SeqChunk] = field(default_factory=list)
    seqs: list[Sequence] = field(default_factory=list)
    size: int | None = None               # graph modes: the batch size every replica replays
    src: list[int] | None = None          # graph modes: per chunk, the in-flight graph row holding its input
                                          # id (-1: the id is on the host), or None when no step is in flight
    decode: list[SeqChunk] = field(default_factory=list)    # graph+prefill, spec: decoding requests' chunks
    prefill: list[SeqChunk] = field(default_factory=list)   # graph+prefill, spec: the prompt chunks
    rows: list[int] = field(default_factory=list)           # the rows that give a token (module table)
    sampled: list[Sequence] = field(default_factory=list)   # the sequences they give it to, decodes first

    @property
    def runs(self) -> bool:
        return self.mode not in (IDLE, RESOLVE)

    @property
    def decode_seqs(self) -> list[Sequence]:
        return self.seqs[:len(self.decode)]

    @property
    def prefill_seqs(self) -> list[Sequence]:
        return self.seqs[len(self.decode):]

    def advancing(self) -> tuple[list[SeqChunk], list[Sequence]]:
        """The chunks whose tokens the step computes as scheduled (a spec step's decodes advance by what it
        accepts), with their sequences."""
        return (self.prefill, self.prefill_seqs) if self.mode == SPEC else (self.chunks, self.seqs)


def sample_rows(chunks: list[SeqChunk], seqs: list[Sequence]) -> tuple[list[int], list[Sequence]]:
    """(row of each chunk's last token, its sequence) for the chunks that reach their sequence's end."""
    rows, sampled, row = [], [], 0
    for ch, seq in zip(chunks, seqs):
        row += ch.num_tokens
        if ch.start + ch.num_tokens == seq.num_tokens:
            rows.append(row - 1)
            sampled.append(seq)
    return rows, sampled


def token_ids(chunks: list[SeqChunk], seqs: list[Sequence]) -> list[int]:
    """The chunks' token ids, in order (seqs[i]: the sequence of chunks[i])."""
    ids: list[int] = []
    for ch, seq in zip(chunks, seqs):
        ids += seq.token_slice(ch.start, ch.start + ch.num_tokens)
    return ids


def make_batch(chunks: list[SeqChunk], seqs: list[Sequence], size: int | None, src: list[int] | None,
               pipelined: bool, spec: bool, split: mixed.Split) -> Batch:
    """The step's mode and sampled rows (module table): a spec step when a speculative engine has decodes, a
    split when a mixed step without a graph size can split (mixed.py), else one forward or one replay of
    `size`."""
    if spec or size is None:
        n = sum(not s.prefilling for s in seqs)
        if (n and spec) or (not spec and split.splits(n, len(chunks))):
            # the scheduler puts the decodes first: chunks[:n] are the decode rows, the rest prompt chunks
            assert all(not s.prefilling for s in seqs[:n]), "a decode chunk after a prompt chunk"
            rows, sampled = sample_rows(chunks[n:], seqs[n:])
            return Batch(SPEC if spec else SPLIT, chunks, seqs, decode=chunks[:n], prefill=chunks[n:],
                         rows=rows, sampled=sampled if spec else seqs[:n] + sampled)
    rows, sampled = sample_rows(chunks, seqs)
    mode = EAGER if size is None else PIPELINED if pipelined else GRAPH
    return Batch(mode, chunks, seqs, size, src, rows=rows, sampled=sampled)
