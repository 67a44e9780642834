import itertools

import pytest
from hypothesis import given, settings, strategies as st

from dcpctl.runtime.kv import AllocatorError, VirtualAllocator, local_len
from dcpctl.runtime.kv.allocator import local_len_sum


def test_geometry_and_slots():
    a = VirtualAllocator(capacity_tokens=8, page_size=2, dcp=4)
    assert (a.num_pages, a.page_tokens, a.virtual_capacity) == (4, 8, 32)
    slots = a.allocate(7, 10)
    assert slots[:8] == list(range(8)) and slots[8:] == [8, 9]
    assert a.free_pages == 2 and a.can_allocate(16) and not a.can_allocate(17)


def test_integrity_message_names_every_term():
    a = VirtualAllocator(capacity_tokens=9, page_size=1, dcp=1)
    a.allocate(0, 5)
    a._free.pop()
    with pytest.raises(AllocatorError, match=r"free_pages\(3\) \+ used_pages\(5\) != num_pages\(9\)"):
        a.check_integrity()


def test_out_of_pages_and_unknown_request():
    a = VirtualAllocator(capacity_tokens=4, page_size=2, dcp=2)
    with pytest.raises(AllocatorError, match=r"pages_for\(9\) = 3 pages, free_pages = 2"):
        a.allocate(0, 9)
    with pytest.raises(AllocatorError, match="unknown request 3"):
        a.free(3)


ops = st.lists(st.tuples(st.sampled_from(["alloc", "grow", "free"]), st.integers(0, 5), st.integers(1, 40)),
               max_size=40)


@settings(max_examples=150, deadline=None)
@given(c=st.integers(1, 4), page=st.integers(1, 3), pages=st.integers(1, 12), ops=ops)
def test_random_sequences_keep_ownership_balance_integrity(c, page, pages, ops):
    a = VirtualAllocator(capacity_tokens=page * pages, page_size=page, dcp=c)
    for op, rid, n in ops:
        have = len(a._slots.get(rid, []))
        if op == "free" and rid in a.requests():
            a.free(rid)
        elif op != "free" and a.can_allocate(have + n, rid):
            a.allocate(rid, have + n)
        a.check_integrity()
        for r in a.requests():
            _check_request(a, r, c)
    for r in a.requests():
        a.free(r)
    assert a.free_pages == a.num_pages
    a.check_integrity()


def _check_request(a, rid, c):
    slots = a.slots(rid)
    assert all(v % c == p % c for p, v in enumerate(slots))
    for r in range(c):
        owned = [v // c for v in slots if v % c == r]
        assert len(owned) == local_len(len(slots), r, c)
        assert len(set(owned)) == len(owned)


@settings(max_examples=100, deadline=None)
@given(c=st.integers(1, 8), length=st.integers(0, 100))
def test_local_len_balanced(c, length):
    lens = [local_len(length, r, c) for r in range(c)]
    assert sum(lens) == length and max(lens) - min(lens) <= 1


def test_physical_slots_disjoint_across_requests():
    a = VirtualAllocator(capacity_tokens=8, page_size=1, dcp=2)
    s0, s1 = list(a.allocate(0, 5)), list(a.allocate(1, 7))
    for r in range(2):
        p0 = {v // 2 for v in s0 if v % 2 == r}
        p1 = {v // 2 for v in s1 if v % 2 == r}
        assert not p0 & p1 and max(p0 | p1) < 8


def test_check_counts_catches_a_leaked_or_double_freed_page():
    a = VirtualAllocator(capacity_tokens=16, page_size=2, dcp=2)
    a.allocate(1, 5)
    a.check_counts()
    a._free.popleft()                              # a page vanishes from every list: a leak
    with pytest.raises(AllocatorError, match=r"free_pages\(\d+\) \+ used_pages\(\d+\) != num_pages\(\d+\)"):
        a.check_counts()
    b = VirtualAllocator(capacity_tokens=16, page_size=2, dcp=2)
    b.allocate(1, 5)
    b._free.append(b.pages(1)[0])                  # a used page also on the free list: a double free
    with pytest.raises(AllocatorError, match="!= num_pages"):
        b.check_counts()


def test_the_stripe_rule_functions_agree_with_the_definition():
    import torch

    from dcpctl.runtime.kv.allocator import (owned, owned_page_rows_tensor, owned_rows, owner, physical,
                                             virtual_slot)
    a = VirtualAllocator(capacity_tokens=12, page_size=2, dcp=3)
    a.allocate(7, 5)
    a.allocate(8, 13)   # request 8 starts on page 1, after request 7
    slots, pages = a.slots(8), a.pages(8)
    for rank, (start, end) in itertools.product(range(3), [(0, 13), (4, 11), (5, 6), (6, 6)]):
        mine = [p for p in range(start, end) if p % 3 == rank]
        assert list(owned(start, end, rank, 3)) == mine
        assert [virtual_slot(pages, p, a.page_tokens) for p in mine] == [slots[p] for p in mine]
        assert owned_rows(slots, start, end, rank, 3) == [slots[p] // 3 for p in mine]
        index, rows = owned_page_rows_tensor(torch.tensor(pages), start, end, rank, 3, a.page_tokens, base=10)
        assert (index.tolist(), rows.tolist()) == ([10 + p - start for p in mine],
                                                   owned_rows(slots, start, end, rank, 3))
    v = torch.tensor(slots)
    assert (owner(v, 3).tolist() == [s % 3 for s in slots]
            and physical(v, 3).tolist() == [s // 3 for s in slots])
    for c, rank in ((1, 0), (3, 0), (3, 2), (4, 3)):   # a step's rows: the positions below each length that
                                                       # rank holds
        lengths = [0, 1, 5, 12, 13]
        assert local_len_sum(lengths, rank, c) == sum(p % c == rank for n in lengths for p in range(n))


@pytest.mark.parametrize("c,page", [(1, 1), (1, 4), (2, 2), (4, 3)])
def test_grow_equals_allocate_one_position_at_a_time_and_in_jumps(c, page):
    # grow: a decode step's one new position is an append inside a held page, else allocate's path (a new
    # page, a jump)
    a, b = VirtualAllocator(256 * page, page, c), VirtualAllocator(256 * page, page, c)
    for rid, start in ((0, 3), (1, 1)):
        a.allocate(rid, start)
        b.allocate(rid, start)
    n = {0: 3, 1: 1}
    for step in range(40):
        for rid in (0, 1):
            n[rid] += 1 if step % 7 else 5           # now and then a jump of several positions
            a.grow(rid, n[rid])
            b.allocate(rid, n[rid])
            assert a.slots(rid) == b.slots(rid) and a.pages(rid) == b.pages(rid)
        a.grow(0, n[0] - 2)                         # fewer than it holds: nothing
        assert a.slots(0) == b.slots(0)
    a.check_integrity()
    with pytest.raises(AllocatorError, match="unknown request 9"):
        a.grow(9, 1)
    with pytest.raises(AllocatorError, match="pages"):
        a.grow(1, a.virtual_capacity)               # past the free pages: allocate's error
