"""Scheduler policy (pure, no torch.distributed): chunking, decode batches, admission by pages."""
import pytest

from dcpctl.runtime.attention.dcp import SeqChunk
from dcpctl.runtime.engine import SamplingParams, Scheduler, SchedulerError, Sequence
from dcpctl.runtime.kv import VirtualAllocator


def _seq(rid, n, new=4):
    return Sequence(rid, list(range(1, n + 1)), SamplingParams(max_new_tokens=new))


def _sched(capacity=32, page=2, dcp=2, chunk=5):
    return Scheduler(VirtualAllocator(capacity, page, dcp), chunk)


def test_prefill_chunks_share_the_budget_then_decode():
    s = _sched()
    for rid, n in enumerate([3, 7]):
        s.add(_seq(rid, n))
    batch = s.next_batch()
    assert batch == [SeqChunk(0, 0, 3), SeqChunk(1, 0, 2)]
    assert s.samples(batch) == [(2, 0)]           # only request 0 reached its last token
    s.advance(batch)
    s.seq(0).output.append(9)
    batch = s.next_batch()
    assert batch == [SeqChunk(1, 2, 5)] and s.samples(batch) == [(4, 1)]
    s.advance(batch)
    s.seq(1).output.append(9)
    assert s.next_batch() == [SeqChunk(0, 3, 1), SeqChunk(1, 7, 1)]


def test_admission_waits_for_pages_and_frees_on_finish():
    s = _sched(capacity=8, page=2, dcp=2)          # 4 pages of 4 virtual slots
    s.add(_seq(0, 6, new=3))                       # max_kv 8 -> 2 pages
    s.add(_seq(1, 9, new=2))                       # max_kv 10 -> 3 pages: must wait
    s.next_batch()
    assert [q.rid for q in s.running] == [0] and s.alloc.free_pages == 2
    s.finish(s.seq(0))
    assert s.alloc.free_pages == 4
    s.next_batch()
    assert [q.rid for q in s.running] == [1] and s.alloc.free_pages == 1


def test_request_errors_name_the_terms():
    s = _sched(capacity=4, page=2, dcp=1)
    with pytest.raises(SchedulerError, match=r"prompt \(4 tokens\) \+ max_new_tokens \(2\) - 1 = 5 KV rows exceeds the KV capacity \(4 "):
        s.add(_seq(0, 4, new=2))
    with pytest.raises(SchedulerError, match=r"max_new_tokens \(0\) < 1"):
        s.add(_seq(1, 1, new=0))
    with pytest.raises(ValueError, match=r"unknown request keys \['temp'\]"):
        SamplingParams.from_dict({"prompt_ids": [1], "temp": 1})


def test_no_chunking_takes_whole_prompts():
    s = _sched(chunk=-1)
    for rid, n in enumerate([9, 11]):
        s.add(_seq(rid, n))
    assert s.next_batch() == [SeqChunk(0, 0, 9), SeqChunk(1, 0, 11)]


def test_token_accessors_equal_the_token_list():
    """num_tokens / token / token_slice (the per-step paths) read what `tokens` would, without building it."""
    seq = Sequence(7, [5, 6, 7], SamplingParams(max_new_tokens=4))
    seq.output = [8, 9]
    whole = seq.tokens
    assert seq.num_tokens == len(whole) == 5
    assert [seq.token(i) for i in range(5)] == whole
    assert all(seq.token_slice(a, b) == whole[a:b] for a in range(6) for b in range(a, 6))
