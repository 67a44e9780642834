"""The paged fast path (block table + mla_decode, forced on CPU with the reference kernel) equals the
layout path exactly: float64, DCP 1/2/4, ag_rs and a2a, prefill chunks + decode, prompts shorter
than c, pad rows, page sizes 1 and 4."""
import pytest
import torch

from dcpctl.runtime.attention.dcp import SeqChunk, build_context
from dcpctl.runtime.attention.paged import build_paged
from dcpctl.runtime.attention.selector import resolve_path
from dcpctl.runtime.attention.triton_mla import kernel_takes
from dcpctl.runtime.kv import KVPool, VirtualAllocator, local_len
from tests.dist import run_ranks
from tests.runtime.configs import typed
from tests.runtime.dcp_steps import grow, seeded_qkv, step_inputs, whole_world

HL, R, L, SCALE = 2, 8, 6, 0.4
LENS = [1, 3, 9, 14]   # request 0 and 1 are shorter than dcp 4
STEPS = [  # (rid, start, num_tokens): prefill chunks, an empty batch, decode batches
    [(0, 0, 1), (1, 0, 2), (2, 0, 5)],
    [(1, 2, 1), (2, 5, 3), (3, 0, 6)],
    [],
    [(2, 8, 1), (3, 6, 7)],
    [(3, 13, 1)],
]
PAD = [0, 2, 1, 3, 0]


def _data(c):
    return seeded_qkv(LENS, c, HL, R, seed=3)


def _rank(rank, world, backend, page, path):
    ps = whole_world(world)
    alloc = VirtualAllocator(capacity_tokens=64, page_size=page, dcp=world)
    pool = KVPool(num_layers=2, capacity=alloc.num_pages * page, row_dim=R, dtype=torch.float64)
    decisions = {"dcp_comm_backend": backend, "lse_base": "e", "attention_path": path}
    qs, kvs = _data(world)
    outs = []
    for step, pad in zip(STEPS, PAD):
        chunks = [SeqChunk(*s) for s in step]
        grow(alloc, chunks)
        ctx = build_context(alloc, pool, ps.dcp, typed(decisions), chunks, L, pad=pad)
        assert ctx.paged == (path == "paged")
        q, kv = step_inputs(qs, kvs, chunks, slice(rank * HL, (rank + 1) * HL), HL, pad)
        for layer in range(2):
            o = ctx.attend(layer, q, kv, SCALE)
        outs.append(o.numpy())
    return outs, pool.kv.numpy().copy()


@pytest.mark.parametrize("c", [1, 2, 4])
@pytest.mark.parametrize("backend", ["ag_rs", "a2a"])
@pytest.mark.parametrize("page", [1, 4])
def test_paged_path_equals_layout_path(c, backend, page):
    if c == 1 and backend == "a2a":
        pytest.skip("a2a needs dcp > 1")
    paged = run_ranks(_rank, c, backend, page, "paged")
    dense = run_ranks(_rank, c, backend, page, "layout")
    for (po, ppool), (do, dpool) in zip(paged, dense):
        assert (ppool == dpool).all()                          # same rows written to the same slots
        for a, b in zip(po, do):
            torch.testing.assert_close(torch.from_numpy(a), torch.from_numpy(b), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("c,page", [(1, 1), (2, 4), (4, 2), (3, 1)])
def test_paged_inputs_follow_pages_and_local_len(c, page):
    alloc = VirtualAllocator(capacity_tokens=64, page_size=page, dcp=c)
    alloc.allocate(9, 3)                                      # interleave page lists
    chunks = [SeqChunk(0, 0, 5), SeqChunk(1, 2, 1), SeqChunk(2, 0, 1)]
    for ch, n in zip(chunks, (5, 11, 1)):
        alloc.allocate(ch.rid, n)
    for r in range(c):
        lay = build_paged(alloc, chunks, r, page, pad=2)
        ends = [ch.start + ch.num_tokens for ch in chunks]
        assert lay.local_lens.tolist() == [local_len(e, r, c) for e in ends] + [0]
        assert lay.row_req.tolist() == [0] * 5 + [1, 2, 3, 3]
        for i, ch in enumerate(chunks):                       # block table row = the request's pages
            k = alloc.pages_for(ends[i])
            assert lay.block_table[i, :k].tolist() == alloc.pages(ch.rid)[:k]
        slots = [alloc.slots(ch.rid)[p] // c for ch in chunks
                 for p in range(ch.start, ch.start + ch.num_tokens)
                 if p % c == r]
        assert lay.write_slots.tolist() == slots


def test_path_resolution():
    assert resolve_path("auto", torch.device("cpu")) == "layout"
    assert resolve_path("auto", torch.device("cuda", 0)) == "paged"
    assert resolve_path("paged", torch.device("cpu")) == "paged"
    with pytest.raises(ValueError, match=r"valid: \['auto', 'paged', 'layout'\]"):
        resolve_path("dense", torch.device("cpu"))
    # rows the Triton kernel takes (each part padded to a power of two >= 16, at most 512 + 256)
    assert kernel_takes(512, 576) and kernel_takes(32, 40) and kernel_takes(24, 64) and kernel_takes(512, 768)
    assert not kernel_takes(520, 584) and not kernel_takes(512, 1024) and not kernel_takes(576, 576)


def _exchanges(rank, world):
    from dcpctl.runtime.attention.comm import exchange_a2a, exchange_ag_rs
    from dcpctl.runtime.attention.fused_merge import merge_a2a, rescale_partial
    ps = whole_world(world)
    g = torch.Generator().manual_seed(rank)
    o = torch.randn(3, 2 * world, L, generator=g)
    lse = torch.randn(3, 2 * world, generator=g)
    lse[0, 0] = -torch.inf                     # an empty shard: its o must never leak
    o[0, 0] = float("nan")
    out = []
    for base in ("e", "2"):
        out.append((exchange_ag_rs(o, lse, base, ps.dcp),
                    exchange_ag_rs(o, lse, base, ps.dcp, rescale_partial)))
        out.append((exchange_a2a(o, lse, base, ps.dcp, torch.bfloat16),
                    exchange_a2a(o, lse, base, ps.dcp, torch.bfloat16, merge_a2a)))
    return [(a.numpy(), b.numpy()) for a, b in out]


def test_fused_merge_hooks_equal_torch_exchanges():
    # the callables DCPContext passes on CUDA, run here through their CPU references
    for pairs in run_ranks(_exchanges, 2):
        for a, b in pairs:
            torch.testing.assert_close(torch.from_numpy(b), torch.from_numpy(a), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_packed_metadata_views_start_on_16_byte_boundaries(dtype):
    # a step's columns share one copy (layout.to_device_many); each view starts where a tensor of its own
    # would be aligned (Triton specializes a kernel per pointer alignment), whatever the batch's sizes
    from dcpctl.runtime.attention.layout import ALIGN_BYTES, host_ints, packed
    for sizes in ((5, 3, 1), (7,), (4, 0, 9), (1, 1, 1, 1)):
        hosts = [host_ints(list(range(10 * k, 10 * k + n))).to(dtype) for k, n in enumerate(sizes)]
        hosts[0] = hosts[0].reshape(1, -1)
        flat, starts = packed(hosts)
        assert all(a * flat.element_size() % ALIGN_BYTES == 0 for a in starts)
        for h, a in zip(hosts, starts):
            assert torch.equal(flat[a:a + h.numel()].view(h.shape), h)
