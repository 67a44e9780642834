"""DCP attention on forked gloo ranks against unsplit causal attention of the whole sequences."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from dcpctl.runtime.attention import local as local_mod
from dcpctl.runtime.attention.dcp import DCPContext, SeqChunk, build_layout
from dcpctl.runtime.attention.local import local_attention
from dcpctl.runtime.kv import KVPool, VirtualAllocator, local_len
from tests.dist import run_ranks
from tests.runtime.dcp_steps import grow, seeded_qkv, step_inputs, whole_world

HL, R, L, SCALE = 2, 8, 6, 0.4
LENS = [2, 4, 8]
STEPS = [  # (rid, start, num_tokens): two prefill chunks, an empty batch, a decode batch
    [(0, 0, 1), (1, 0, 2), (2, 0, 5)],
    [(1, 2, 1), (2, 5, 2)],
    [],
    [(0, 1, 1), (1, 3, 1), (2, 7, 1)],
]
PAD = [0, 2, 1, 3]  # dummy rows appended to each step (must come out as zeros)


def _data(c):
    return seeded_qkv(LENS, c, HL, R, seed=7)


def _reference(c, step):
    qs, kvs = _data(c)
    outs = []
    for rid, start, n in step:
        for p in range(start, start + n):
            mask = torch.ones(1, p + 1, dtype=torch.bool)
            outs.append(local_attention(qs[rid][p:p + 1], kvs[rid][:p + 1], mask, SCALE, L)[0])
    return torch.cat(outs) if outs else torch.zeros(0, HL * c, L, dtype=torch.float64)


def _rank(rank, world, backend, dtype, base, q_is_group, dense_limit):
    ps = whole_world(world)
    alloc = VirtualAllocator(capacity_tokens=16, page_size=2, dcp=world)
    pool = KVPool(num_layers=2, capacity=16, row_dim=R, dtype=dtype)
    qs, kvs = _data(world)
    outs = []
    for step, pad in zip(STEPS, PAD):
        chunks = [SeqChunk(*s) for s in step]
        grow(alloc, chunks)
        ctx = DCPContext(build_layout(alloc, chunks, ps.dcp.rank, pad=pad), pool, ps.dcp, backend, base, L,
                         dense_limit=dense_limit)
        heads = slice(None) if q_is_group else slice(rank * HL, (rank + 1) * HL)
        q, kv = step_inputs(qs, kvs, chunks, heads, HL * (world if q_is_group else 1), pad)
        for layer in range(2):
            o = ctx.attend(layer, q.to(dtype), kv.to(dtype), SCALE, q_is_group=q_is_group)
        assert o.shape == (q.shape[0], HL, L) and o.dtype == dtype
        outs.append(o.double().numpy())  # tensors do not survive the fork queue
    rows = int((pool.kv[0].abs().sum(-1) > 0).sum())
    return outs, rows


BIG, SEGMENTED = 1 << 22, 0  # dense_limit: one masked matmul, or the per-chunk path
CASES = [  # (dcp, backend, dtype, lse_base, q_is_group, dense_limit)
    (1, "ag_rs", torch.float64, "e", False, BIG),
    (1, "ag_rs", torch.float64, "e", False, SEGMENTED),
    (2, "ag_rs", torch.float64, "2", False, BIG),
    (2, "a2a", torch.float64, "e", True, SEGMENTED),
    (4, "ag_rs", torch.float64, "e", True, BIG),
    (4, "a2a", torch.float64, "2", False, SEGMENTED),
    (2, "a2a", torch.bfloat16, "2", False, BIG),
    (4, "a2a", torch.float32, "e", False, BIG),
]


@pytest.mark.parametrize("c,backend,dtype,base,q_is_group,dense_limit", CASES)
def test_dcp_attention_matches_unsplit(c, backend, dtype, base, q_is_group, dense_limit):
    results = run_ranks(_rank, c, backend, dtype, base, q_is_group, dense_limit)
    tol = {torch.float64: 1e-12, torch.float32: 1e-5, torch.bfloat16: 3e-2}[dtype]
    for rank, (outs, rows) in enumerate(results):
        for step, pad, o in zip(STEPS, PAD, outs):
            want = _reference(c, step)[:, rank * HL:(rank + 1) * HL]
            want = torch.cat([want, torch.zeros(pad, HL, L, dtype=want.dtype)])
            torch.testing.assert_close(torch.from_numpy(o), want, atol=tol, rtol=tol)
        assert rows == sum(n // c + (rank < n % c) for n in LENS)



@settings(max_examples=80, deadline=None)
@given(c=st.integers(1, 4),
       lens=st.lists(st.tuples(st.integers(0, 9), st.integers(1, 9)), min_size=1, max_size=4))
def test_layout_writes_each_row_once_and_shards_follow_local_len(c, lens):
    alloc = VirtualAllocator(capacity_tokens=128, page_size=2, dcp=c)
    chunks = [SeqChunk(i, start, n) for i, (start, n) in enumerate(lens)]
    for ch in chunks:
        alloc.allocate(ch.rid, ch.start + ch.num_tokens)
    lays = [build_layout(alloc, chunks, r) for r in range(c)]
    written = sorted(row for lay in lays for row in lay.write_rows.tolist())
    assert written == list(range(sum(n for _, n in lens)))
    for r, lay in enumerate(lays):
        assert lay.kv_slots.numel() == sum(local_len(s + n, r, c) for s, n in lens)
        assert all(p % c == r for p in lay.kv_pos.tolist())


def test_segmented_equals_dense_with_tiny_blocks(monkeypatch):
    monkeypatch.setattr(local_mod, "BLOCK_ELEMS", 5)
    g = torch.Generator().manual_seed(1)
    alloc = VirtualAllocator(capacity_tokens=32, page_size=1, dcp=2)
    chunks = [SeqChunk(0, 0, 6), SeqChunk(1, 3, 4), SeqChunk(2, 0, 1)]
    for ch in chunks:
        alloc.allocate(ch.rid, ch.start + ch.num_tokens)
    lay = build_layout(alloc, chunks, 1, pad=2)
    q = torch.randn(lay.positions.numel(), 3, R, generator=g, dtype=torch.float64)
    kv = torch.randn(lay.kv_pos.numel(), R, generator=g, dtype=torch.float64)
    mask = local_mod.attention_mask(lay.positions, lay.seq, lay.kv_pos, lay.kv_seq)
    want = local_mod.local_attention(q, kv, mask, SCALE, L, "2")
    got = local_mod.segmented_attention(q, kv, lay.positions, lay.kv_pos, lay.q_bounds, lay.kv_bounds, SCALE,
                                        L, "2")
    torch.testing.assert_close(got[0], want[0], atol=1e-14, rtol=1e-14)
    torch.testing.assert_close(got[1], want[1], atol=1e-14, rtol=1e-14)
    assert torch.isneginf(got[1][-3:]).all()  # chunk 2 on dcp rank 1 (position 0 only) and both pads
