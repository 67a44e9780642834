"""Scheduler policy (pure, no torch.distributed): chunking, decode batches, admission by pages."""
import pytest

from dcpctl.contract.launch_config import ScheduleSection
from dcpctl.runtime.attention.dcp import SeqChunk
from dcpctl.runtime.engine import SamplingParams, Scheduler, SchedulerError, Sequence
from dcpctl.runtime.kv import VirtualAllocator


def _seq(rid, n, new=4):
    return Sequence(rid, list(range(1, n + 1)), SamplingParams(max_new_tokens=new))


def _sched(capacity=32, page=2, dcp=2, chunk=5, **schedule):
    return Scheduler(VirtualAllocator(capacity, page, dcp), chunk, schedule=ScheduleSection(**schedule))


def test_mixed_step_carries_decodes_and_prefill_within_the_budget():
    s = _sched()
    for rid, n in enumerate([3, 7]):
        s.add(_seq(rid, n))
    batch = s.next_batch()
    assert batch == [SeqChunk(0, 0, 3), SeqChunk(1, 0, 2)]
    assert s.samples(batch) == [(2, 0)]           # only request 0 reached its last token
    s.advance(batch)
    s.seq(0).output.append(9)
    batch = s.next_batch()                        # request 0 decodes; its token counts against the 5
    assert batch == [SeqChunk(0, 3, 1), SeqChunk(1, 2, 4)] and s.samples(batch) == [(0, 0)]
    s.advance(batch)
    s.seq(0).output.append(9)
    batch = s.next_batch()
    assert batch == [SeqChunk(0, 4, 1), SeqChunk(1, 6, 1)] and s.samples(batch) == [(0, 0), (1, 1)]


def test_decodes_replayed_apart_leave_the_chunks_the_whole_budget():
    s = _sched(capacity=64)
    s.decodes_apart = 1                           # the engine replays up to one decode as its own graph
    for rid, n in enumerate([3, 12]):
        s.add(_seq(rid, n))
    s.advance(s.next_batch())                     # 3 + 2
    s.seq(0).output.append(9)
    batch = s.next_batch()                        # one decode, apart: request 1 still gets all 5
    assert batch == [SeqChunk(0, 3, 1), SeqChunk(1, 2, 5)]
    s = _sched(capacity=64)
    s.decodes_apart = 1
    for rid, n in enumerate([1, 1, 12]):
        s.add(_seq(rid, n))
    s.advance(s.next_batch())                     # 1 + 1 + 3
    for rid in (0, 1):
        s.seq(rid).output.append(9)
    batch = s.next_batch()                        # two decodes, more than run apart: they count again
    assert batch == [SeqChunk(0, 1, 1), SeqChunk(1, 1, 1), SeqChunk(2, 3, 3)]


def test_unmixed_steps_run_prefill_chunks_first_then_decode():
    s = _sched(mixed_chunk=False)
    for rid, n in enumerate([3, 7]):
        s.add(_seq(rid, n))
    batch = s.next_batch()
    assert batch == [SeqChunk(0, 0, 3), SeqChunk(1, 0, 2)]
    s.advance(batch)
    s.seq(0).output.append(9)
    batch = s.next_batch()
    assert batch == [SeqChunk(1, 2, 5)] and s.samples(batch) == [(4, 1)]
    s.advance(batch)
    s.seq(1).output.append(9)
    assert s.next_batch() == [SeqChunk(0, 3, 1), SeqChunk(1, 7, 1)]


def test_decodes_above_the_budget_still_let_one_prefill_token_in():
    s = _sched(capacity=64, chunk=2)
    for rid in range(3):
        s.add(_seq(rid, 1, new=8))
    s.advance(s.next_batch())                     # three one-token prompts: 1 + 1 (budget 2), then the third
    for q in s.running[:2]:
        q.output.append(9)
    batch = s.next_batch()
    assert batch == [SeqChunk(0, 1, 1), SeqChunk(1, 1, 1), SeqChunk(2, 0, 1)]


def test_admission_counts_held_kv_plus_headroom_not_max_new_tokens():
    # the early-stop batch: 16 requests of max_tokens 1800 on a 4,096-token pool all run at once
    s = _sched(capacity=4096, page=1, dcp=1, chunk=-1)
    for rid in range(16):
        s.add(_seq(rid, 60, new=1800))
    s.next_batch()
    assert len(s.running) == 16 and not s.waiting
    assert s.alloc.free_pages == 4096 - 16 * 60
    # one more of 3000 tokens waits: it would leave less than 20 positions of headroom per request
    s.add(_seq(16, 3000, new=10))
    s.next_batch()
    assert len(s.running) == 16 and [q.rid for q in s.waiting] == [16]


def test_admission_waits_for_pages_and_frees_on_finish():
    s = _sched(capacity=8, page=2, dcp=2, decode_headroom=1)   # 4 pages of 4 virtual slots
    s.add(_seq(0, 6, new=3))                       # holds 6 (+1 headroom) -> 2 pages
    s.add(_seq(1, 9, new=2))                       # 9 + 1 -> 3 pages: must wait
    s.next_batch()
    assert [q.rid for q in s.running] == [0] and s.alloc.free_pages == 2
    s.finish(s.seq(0))
    assert s.alloc.free_pages == 4
    s.next_batch()
    assert [q.rid for q in s.running] == [1] and s.alloc.free_pages == 1


def test_retract_decode_frees_pages_requeues_and_recomputes():
    s = _sched(capacity=11, page=1, dcp=1, chunk=-1, decode_headroom=1)   # 11 pages of one token
    for rid, n in enumerate([2, 3, 2]):
        s.add(_seq(rid, n, new=8))
    s.advance(s.next_batch())
    for rid, out in {0: [7, 7, 7], 1: [7], 2: [7]}.items():
        q = s.seq(rid)
        q.output += out                            # as if decoded: rows 0..num_tokens-2 are written
        q.computed = q.num_tokens - 1
        s.alloc.allocate(rid, q.computed)
    assert s.alloc.free_pages == 11 - (4 + 3 + 2)
    # each needs one more page, two are free: retract the fewest outputs, then the longest prompt (request 1)
    batch = s.next_batch()
    assert s.retractions == 1 and [q.rid for q in s.waiting] == [1]
    assert batch == [SeqChunk(0, 4, 1), SeqChunk(2, 2, 1)] and s.alloc.free_pages == 11 - (5 + 3)
    s.alloc.check_integrity()
    back = s.waiting[0]
    assert (back.computed, back.prefill_to, back.retracted) == (0, 4, 1) and back.prefilling
    s.advance(batch)
    s.finish(s.seq(0))
    s.seq(2).output.append(7)
    batch = s.next_batch()      # request 1 returns only once all its 8 new tokens fit (10 pages; 8 free)
    assert batch == [SeqChunk(2, 3, 1)] and [q.rid for q in s.waiting] == [1]
    s.advance(batch)
    s.finish(s.seq(2))
    batch = s.next_batch()      # request 1 returns: prompt + output recomputed, its next token from the last
                                # row
    assert batch == [SeqChunk(1, 0, 4)] and s.samples(batch) == [(3, 1)]


def test_request_errors_name_the_terms():
    s = _sched(capacity=4, page=2, dcp=1)
    with pytest.raises(SchedulerError,
                       match=r"prompt \(4 tokens\) \+ max_new_tokens \(2\) - 1 = 5 KV rows exceeds the KV "
                             r"capacity \(4 "):
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
