"""DeviceBlockTable on CPU: random decode steps (requests join, leave, come back under the same id,
pause, grow across page boundaries, move rows; the batch shrinks and grows) keep every assigned row's
live part equal to a from-scratch rebuild while writing only what changed; DecodeGraphs.prepare's
buffers equal build_paged's through the same steps."""
import random
from types import SimpleNamespace

import pytest
import torch

from dcpctl.runtime.attention.block_table import DeviceBlockTable
from dcpctl.runtime.engine.decode_graphs import DecodeGraphs
from dcpctl.runtime.attention.layout import SeqChunk
from dcpctl.runtime.attention.paged import build_paged
from dcpctl.runtime.attention.triton_mla import mla_decode_reference
from dcpctl.runtime.kv import KVPool, VirtualAllocator, local_len
from tests.runtime.configs import typed

BMAX, LIVE, STEPS = 8, 12, 80


class _Sim:
    """Random decode steps over one allocator; `batch` is the step's rids in row order."""

    def __init__(self, c: int, page: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.pt = page * c
        self.max_len = max(6 * self.pt, 40)
        self.width = -(-self.max_len // self.pt) + 1
        self.alloc = VirtualAllocator(LIVE * self.width * page, page, c)
        self.pos: dict[int, int] = {}                 # live rid -> position of its next token
        self.batch: list[int] = []
        self.paused: list[int] = []
        self.reuse: list[int] = []                    # freed ids a later request takes again
        self.next_rid = 0

    def step(self) -> list[SeqChunk]:
        r = self.rng
        for rid in list(self.batch):
            if r.random() < 0.08:
                self._leave(rid)
            elif r.random() < 0.05 and len(self.paused) < LIVE - BMAX:
                self.batch.remove(rid)
                self.paused.append(rid)
        for rid in list(self.paused):
            if r.random() < 0.3 and len(self.batch) < BMAX:
                self.paused.remove(rid)
                self.batch.insert(r.randrange(len(self.batch) + 1), rid)
        while len(self.batch) < BMAX and r.random() < 0.4:
            self._join()
        if r.random() < 0.05:
            r.shuffle(self.batch)
        for rid in list(self.batch):
            jump = r.randint(1, 2 * self.pt) if r.random() < 0.05 else 0
            if self.pos[rid] + jump + 1 > self.max_len:
                self._leave(rid)
                continue
            self.pos[rid] += jump
            self.alloc.allocate(rid, self.pos[rid] + 1)
        chunks = [SeqChunk(rid, self.pos[rid], 1) for rid in self.batch]
        for rid in self.batch:
            self.pos[rid] += 1
        return chunks

    def _leave(self, rid: int) -> None:
        self.batch.remove(rid)
        del self.pos[rid]
        self.alloc.free(rid)
        if self.rng.random() < 0.5:
            self.reuse.append(rid)

    def _join(self) -> None:
        r = self.rng
        rid = self.reuse.pop(0) if self.reuse and r.random() < 0.5 else self._new_id()
        self.pos[rid] = r.randint(0, 4 * self.pt)
        self.alloc.allocate(rid, self.pos[rid] + 1)
        self.batch.insert(r.randrange(len(self.batch) + 1), rid)

    def _new_id(self) -> int:
        self.next_rid += 1
        return self.next_rid - 1


def _assignments(alloc: VirtualAllocator, chunks: list[SeqChunk]) -> list:
    return [(i, ch.rid, alloc.pages_for(ch.start + 1), alloc.pages(ch.rid)) for i, ch in enumerate(chunks)]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("page", [1, 4, 64])
@pytest.mark.parametrize("c", [1, 2, 4])
def test_random_steps_equal_rebuild_and_write_only_changes(c, page, seed):
    sim = _Sim(c, page, seed)
    table = torch.zeros(BMAX + 1, sim.width, dtype=torch.int32)
    bt = DeviceBlockTable(table)
    prev: dict[int, tuple[list[int], int]] = {}       # last step's rid -> (its page list, needed)
    written = rebuilt = moved = 0
    for _ in range(STEPS):
        rows = _assignments(sim.alloc, sim.step())
        w = bt.update(rows)
        for i, rid, need, pages in rows:               # the live part equals a rebuild
            assert table[i, :need].tolist() == pages[:need], (i, rid)
        assert not table[BMAX].any()                   # the empty row is never written
        kept = {rid: need - prev[rid][1]
                for _, rid, need, pages in rows if rid in prev and prev[rid][0] is pages}
        assert w.entries <= sum(kept.get(rid, need) for _, rid, need, _ in rows)
        assert w.moved <= len(rows)
        prev = {rid: (pages, need) for _, rid, need, pages in rows}
        written, moved = written + w.entries, moved + w.moved
        rebuilt += sum(need for _, _, need, _ in rows)
    assert written < rebuilt and moved > 0


def test_same_id_re_created_is_rewritten_and_moves_append():
    alloc = VirtualAllocator(64, 1, 1)
    table = torch.zeros(3, 8, dtype=torch.int32)
    bt = DeviceBlockTable(table)
    alloc.allocate(0, 3)
    assert bt.update(_assignments(alloc, [SeqChunk(0, 2, 1)])) == (3, 0)
    alloc.free(0)
    alloc.allocate(1, 5)
    alloc.allocate(0, 2)                                # same id, new list, other pages
    assert bt.update(_assignments(alloc, [SeqChunk(0, 1, 1)])) == (2, 0)
    assert table[0, :2].tolist() == alloc.pages(0)
    alloc.allocate(0, 4)                                # moves to row 1 and crosses two page boundaries
    assert bt.update([(1, 0, 4, alloc.pages(0)), (0, 1, 5, alloc.pages(1))]) == (2 + 5, 1)
    assert table[1, :4].tolist() == alloc.pages(0) and table[0, :5].tolist() == alloc.pages(1)
    assert bt.update([(1, 0, 4, alloc.pages(0))]) == (0, 0)


def test_misuse_raises():
    alloc = VirtualAllocator(16, 1, 1)
    alloc.allocate(0, 3)
    bt = DeviceBlockTable(torch.zeros(3, 2, dtype=torch.int32))
    with pytest.raises(ValueError,
                       match=r"needed pages \(3\) > min\(allocated pages \(3\), table width \(2\)\)"):
        bt.update([(0, 0, 3, alloc.pages(0))])
    with pytest.raises(ValueError, match=r"row 2 not in \[0, rows\(2\)\)"):
        bt.update([(2, 0, 1, alloc.pages(0))])
    with pytest.raises(ValueError, match="repeat request ids"):
        bt.update([(0, 0, 1, alloc.pages(0)), (1, 0, 1, alloc.pages(0))])


@pytest.mark.parametrize("c", [1, 2, 4])
def test_attention_never_reads_past_the_live_part(c):
    # every entry past a row's needed pages (and every row of pads) poisoned out of range: the reference
    # gathers only below local_lens, so it neither fails nor changes its output
    sim, page, v_dim = _Sim(c, 4, seed=3), 4, 16
    table = torch.zeros(BMAX + 1, sim.width, dtype=torch.int32)
    bt = DeviceBlockTable(table)
    pool = torch.randn(sim.alloc.num_pages, page, 2 * v_dim, dtype=torch.float64)
    for _ in range(20):
        chunks = sim.step()
        rows = _assignments(sim.alloc, chunks)
        bt.update(rows)
        poisoned = torch.full_like(table, 10**6)
        for i, _, need, _ in rows:
            poisoned[i, :need] = table[i, :need]
        q = torch.randn(len(chunks), 2, 2 * v_dim, dtype=torch.float64)
        pos = torch.tensor([ch.start for ch in chunks], dtype=torch.int32)
        for r in range(c):
            lens = torch.tensor([local_len(ch.start + 1, r, c) for ch in chunks]
                                + [0] * (BMAX + 1 - len(chunks)))
            rest = (lens, torch.arange(len(chunks), dtype=torch.int32), pos)
            kw = dict(scale=0.1, v_dim=v_dim, dcp_rank=r, dcp_size=c)
            got = mla_decode_reference(q, pool, poisoned, *rest, **kw)
            ref = mla_decode_reference(q, pool, table, *rest, **kw)
            torch.testing.assert_close(got.o, ref.o, rtol=0, atol=0)


def _stub_model(rank: int) -> SimpleNamespace:
    # what DecodeGraphs needs off CUDA before a replay: the parallel state, the hidden size, the embedding
    ps = SimpleNamespace(attn_dp_size=1, dcp=SimpleNamespace(rank=rank))
    return SimpleNamespace(ps=ps, cfg=SimpleNamespace(hidden_size=4), dtype=torch.float32,
                           _embed=lambda ids: torch.zeros(len(ids), 4))


@pytest.mark.parametrize("page", [1, 4])
@pytest.mark.parametrize("c", [1, 2, 4])
def test_prepare_buffers_equal_build_paged(c, page):
    sims = [_Sim(c, page, seed=7) for _ in range(c)]      # one per rank, the same steps
    pool = KVPool(1, 4, 8, torch.float32)
    trash = 10**6
    runners = [DecodeGraphs(_stub_model(r), s.alloc, pool, typed({}), 4, [2, 4, BMAX], s.width, trash)
               for r, s in enumerate(sims)]
    for _ in range(STEPS):
        for r, (sim, g) in enumerate(zip(sims, runners)):
            chunks = sim.step()
            if not chunks:
                continue
            n, b = len(chunks), g.prepare(torch.zeros(len(chunks), dtype=torch.int64), chunks)[0]
            ref = build_paged(sim.alloc, chunks, r, page, max_pages=sim.width)
            g.int32_columns(b)                  # a replay's first op
            assert torch.equal(g.q_pos[:n], ref.q_pos[:n])
            for i, ch in enumerate(chunks):
                need = sim.alloc.pages_for(ch.start + 1)
                assert torch.equal(g.block_table[i, :need], ref.block_table[i, :need])
            assert torch.equal(g.local_lens[:n], ref.local_lens[:n]) and not g.local_lens[n:b + 1].any()
            slots = torch.full((b,), trash, dtype=torch.int64)
            slots[ref.write_rows] = ref.write_slots
            assert torch.equal(g.write_slots[:b], slots)
