"""The scheduled value (engine/batch.py, pure): which mode a step runs in and which rows give a token, for
each row of the module's table; and graph_capture's CPU behaviour (a replay runs the call; an out-of-memory
build is None)."""
import pytest
import torch

from dcpctl.runtime.attention.dcp import SeqChunk
from dcpctl.runtime.engine import SamplingParams, Sequence
from dcpctl.runtime.engine.batch import (EAGER, GRAPH, PIPELINED, SPEC, SPLIT, make_batch, sample_rows,
                                         token_ids)
from dcpctl.runtime.engine.mixed import Split
from dcpctl.runtime.graph_capture import capture_set, unless_out_of_memory

SPLITS = Split(None, 4)     # splits up to 4 decodes


def _decoding(rid, n=3):
    """A request past its prefill (one token produced): its next chunk is one token at position n."""
    s = Sequence(rid, list(range(1, n + 1)), SamplingParams(max_new_tokens=8), output=[7], computed=n)
    return s, SeqChunk(rid, n, 1)


def _prompt(rid, n, start, size):
    """A request prefilling a prompt of n tokens, its chunk start .. start + size."""
    return Sequence(rid, list(range(1, n + 1)), SamplingParams(), computed=start), SeqChunk(rid, start, size)


def _parts(*pairs):
    return [c for _, c in pairs], [s for s, _ in pairs]


def test_one_token_chunks_replay_a_graph_or_pipeline_and_every_row_gives_a_token():
    chunks, seqs = _parts(_decoding(0), _decoding(1, 5))
    for pipelined, mode in ((False, GRAPH), (True, PIPELINED)):
        b = make_batch(chunks, seqs, 2, [-1, 0], pipelined, False, SPLITS)
        assert (b.mode, b.size, b.src, b.rows, b.sampled) == (mode, 2, [-1, 0], [0, 1], seqs)
        assert b.advancing() == (chunks, seqs) and b.runs


def test_a_mixed_step_splits_decodes_first_and_samples_the_chunks_that_end():
    chunks, seqs = _parts(_decoding(0), _decoding(1), _prompt(2, 10, 0, 6), _prompt(3, 4, 0, 4))
    b = make_batch(chunks, seqs, None, None, False, False, SPLITS)
    assert b.mode == SPLIT and b.decode == chunks[:2] and b.prefill == chunks[2:]
    assert b.rows == [9] and b.sampled == [seqs[0], seqs[1], seqs[3]]   # rows of the prompt chunks' forward
    assert b.decode_seqs == seqs[:2] and b.prefill_seqs == seqs[2:]
    assert token_ids(b.prefill, b.prefill_seqs) == [1, 2, 3, 4, 5, 6, 1, 2, 3, 4]


@pytest.mark.parametrize("split", [Split("mixed steps: off here", 4), Split(None, 0), Split(None, 1)])
def test_a_mixed_step_that_cannot_split_runs_one_eager_forward(split):
    # off (no graphs, attention DP), not captured yet, or more decodes than the largest graph
    chunks, seqs = _parts(_decoding(0), _decoding(1), _prompt(2, 10, 0, 6))
    b = make_batch(chunks, seqs, None, None, False, False, split)
    assert (b.mode, b.rows, b.sampled) == (EAGER, [0, 1], seqs[:2])


def test_a_speculative_step_verifies_decodes_and_carries_prompt_chunks():
    chunks, seqs = _parts(_decoding(0), _prompt(1, 3, 0, 3))
    b = make_batch(chunks, seqs, None, None, False, True, SPLITS)
    assert b.mode == SPEC and b.decode == chunks[:1] and b.rows == [2] and b.sampled == seqs[1:]
    assert b.advancing() == (chunks[1:], seqs[1:])     # the decodes advance by what the target accepts
    prefill_only = make_batch(chunks[1:], seqs[1:], None, None, False, True, SPLITS)
    assert prefill_only.mode == EAGER


def test_sample_rows_are_the_last_rows_of_chunks_that_reach_their_end():
    chunks, seqs = _parts(_prompt(0, 10, 0, 4), _prompt(1, 3, 0, 3), _decoding(2))
    assert sample_rows(chunks, seqs) == ([6, 7], seqs[1:])


def test_capture_set_off_cuda_replays_the_call_itself():
    calls, progress = [], []
    done = capture_set([3, 1], lambda k: lambda: calls.append(k) or k * 10, torch.device("cpu"),
                       lambda i, n: progress.append((i, n)), measure=True)
    assert calls == [] and progress == [(1, 2), (2, 2)] and done.pool_bytes == 0
    assert done.pieces[1].graph is None and done.pieces[1].replay() == 10 and calls == [1]


def test_a_build_out_of_gpu_memory_is_none():
    def oom():
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")
    assert unless_out_of_memory(oom) is None and unless_out_of_memory(lambda: 5) == 5
