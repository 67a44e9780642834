"""FlashMLA's own edges on an sm_90 GPU (skipped elsewhere): empty rows, partial pages, CUDA-graph replays.

The runtime never hands FlashMLA a zero-length row (flashmla.decode_rows reads one row and masks the lse to
-inf); what FlashMLA itself does with one is probed apart, in a process of its own with a time limit
(benchmarks/flashmla/zero_len_probe.py).  The through-the-merge exactness at DCP 1/2/4 is
tests/runtime/attention/test_gpu_backends.py.
"""
import math

import pytest
import torch

from dcpctl.runtime.attention import flashmla, flashmla_setup
from tests.runtime.attention.needs import need_backend

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
    reason="needs an sm_90 GPU")]

R, V, PAGE = 576, 512, 64
SCALE = 1 / math.sqrt(192)


@pytest.fixture(scope="module", autouse=True)
def mod():
    """Every test here needs FlashMLA: without it (not built, not sm_90) each skips with its blocker's
    reason."""
    need_backend("flashmla")
    return flashmla_setup.load()[0]


def _case(heads, lens, pages_per_row=4):
    g = torch.Generator(device="cuda").manual_seed(7)
    pool = torch.randn(len(lens) * pages_per_row + 1, PAGE, R, device="cuda", generator=g).bfloat16()
    table = ((1 + torch.randperm(len(lens) * pages_per_row, device="cuda", generator=g)).int()
             .view(len(lens), -1))
    q = torch.randn(len(lens), heads, R, device="cuda", generator=g).bfloat16()
    return q, pool, table, torch.tensor(lens, dtype=torch.int32, device="cuda")


def _want(q, pool, table, lens):
    # -> o [B, H, V], lse [B, H] natural (-inf for an empty row), fp32
    os_, ls = [], []
    for b, n in enumerate(lens.tolist()):
        kv = pool[table[b].long()].flatten(0, 1)[:n].float()
        s = q[b].float() @ kv.T * SCALE
        ls.append(torch.logsumexp(s, -1) if n else torch.full((q.shape[1],), -math.inf, device="cuda"))
        os_.append(torch.softmax(s, -1) @ kv[:, :V] if n else torch.zeros(q.shape[1], V, device="cuda"))
    return torch.stack(os_), torch.stack(ls)


@pytest.mark.parametrize("heads", [16, 128])
def test_partial_pages_and_empty_rows(mod, heads):
    q, pool, table, lens = _case(heads, [0, 1, 63, 64, 65, 200, 0, 256])
    o, lse = flashmla.run(q, pool, table, flashmla.decode_rows(lens, heads), SCALE, V)
    want_o, want_lse = _want(q, pool, table, lens)
    seen = lens > 0
    assert torch.isneginf(lse[~seen]).all()
    rel = float((o[seen].float() - want_o[seen]).norm() / want_o[seen].norm())
    err = float((lse[seen] - want_lse[seen]).abs().max())
    assert rel < 1e-2 and err < 2e-2, (rel, err)


def test_replays_in_a_cuda_graph(mod):
    q, pool, table, lens = _case(128, [5, 300, 64])
    rows = flashmla.decode_rows(lens, 128)
    eager = flashmla.run(q, pool, table, rows, SCALE, V)
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        flashmla.run(q, pool, table, rows, SCALE, V)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        got = flashmla.run(q, pool, table, rows, SCALE, V)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(got[0], eager[0]) and torch.equal(got[1], eager[1])



def test_metadata_and_decode_capture_together(mod):
    """What the decode graphs would need (engine/decode_graphs.py): the per-batch rows and metadata made
    inside the capture from device buffers, so a replay after the buffers change equals an eager call on the
    new lengths."""
    import types
    q, pool, table, lens = _case(128, [5, 300, 64, 0])
    lay = types.SimpleNamespace(block_table=table, row_req=torch.arange(4, dtype=torch.int32, device="cuda"),
                                local_lens=lens.clone(), backend_state={}, rows_are_chunks=True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        flashmla.flashmla_decode(q, pool, types.SimpleNamespace(**{**vars(lay), "backend_state": {}}), SCALE,
                                 V)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        got = flashmla.flashmla_decode(q, pool, lay, SCALE, V)
    lay.local_lens.copy_(torch.tensor([200, 1, 0, 256], dtype=torch.int32))
    g.replay()
    torch.cuda.synchronize()
    want = flashmla.run(q, pool, table, flashmla.decode_rows(lay.local_lens.clone(), 128), SCALE, V)
    assert torch.equal(got.o[[0, 1, 3]], want[0][[0, 1, 3]]) and torch.equal(got.lse, want[1])


class _Counting:
    """FlashMLA's module with its get_mla_metadata calls counted."""

    def __init__(self, m):
        self.m, self.made = m, 0

    def get_mla_metadata(self, *a):
        self.made += 1
        return self.m.get_mla_metadata(*a)

    def __getattr__(self, name):
        return getattr(self.m, name)


def test_graph_rows_remake_metadata_only_when_a_block_count_changes(mod, monkeypatch):
    """The decode graphs' metadata outside the graph (flashmla.GraphRows): a replay after `refresh` equals an
    eager call on the new lengths bit for bit, the metadata is remade only when a row crosses into a new
    64-row block, and a replay on metadata of other block counts is wrong (what the refresh is for)."""
    spy = _Counting(mod)
    monkeypatch.setattr(flashmla, "load", lambda: (spy, None))
    q, pool, table, lens = _case(128, [5, 300, 64, 0], pages_per_row=6)
    rows = flashmla.GraphRows(128)
    buf = lens.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        flashmla.run(q, pool, table, rows.decode_rows(buf, True, recording=False), SCALE, V)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        got = flashmla.run(q, pool, table, rows.decode_rows(buf, True, recording=True), SCALE, V)
    made = spy.made
    steps = [[6, 301, 64, 0], [7, 302, 65, 0], [8, 303, 66, 1], [9, 320, 66, 1], [64, 321, 128, 2],
             [65, 383, 129, 2]]
    remade = []
    for new in steps:
        buf.copy_(torch.tensor(new, dtype=torch.int32))
        before = spy.made
        rows.refresh(new, buf)
        remade.append(spy.made > before)
        g.replay()
        want = flashmla.run(q, pool, table, flashmla.decode_rows(buf.clone(), 128), SCALE, V)
        torch.cuda.synchronize()
        live = buf > 0
        assert torch.equal(got[0][live], want[0][live]) and torch.equal(got[1], want[1]), new
    # the first refresh after capture always remakes (the capture made it from the buffers); then only
    # crossings (block counts [1,5,1,1], [1,5,2,1], same, same (320 is 5 whole blocks), [1,6,2,1], [2,6,3,1])
    assert made == 1 and remade == [True, True, False, False, True, True], remade
    # row 0 crosses into block 3: no refresh
    buf.copy_(torch.tensor([129, 383, 129, 2], dtype=torch.int32))
    g.replay()
    want = flashmla.run(q, pool, table, flashmla.decode_rows(buf.clone(), 128), SCALE, V)
    torch.cuda.synchronize()
    assert not torch.equal(got[0][0], want[0][0])


def test_decode_graphs_with_flashmla_equal_eager_across_blocks(tmp_path):
    """Decode graphs on FlashMLA (its metadata remade outside the graph) give the logits of eager FlashMLA
    steps while the rows cross 64-row blocks, at DCP 1."""
    from dcpctl.runtime.attention.dcp import SeqChunk, build_context
    from dcpctl.runtime.engine.decode_graphs import DecodeGraphs
    from dcpctl.runtime.kv import KVPool, VirtualAllocator
    from dcpctl.runtime.models import load_model
    from dcpctl.runtime.parallel import ParallelState
    from dcpctl.runtime.tiny import write_tiny_model
    from tests.runtime.configs import typed
    from tests.runtime.attention.test_gpu_backends import LATENT
    path = write_tiny_model(tmp_path / "model", **LATENT)
    dec = typed({"attention_backend": "flashmla"})
    lens, steps = [60, 63, 127, 200], 8
    out = {}
    for graphs in (False, True):
        ps = ParallelState.single()
        model = load_model(path, ps, False, torch.bfloat16, torch.device("cuda"))
        alloc = VirtualAllocator(4096, PAGE, 1)
        kv = KVPool(model.cfg.num_layers, (alloc.num_pages + 1) * PAGE, model.cfg.latent_dim, torch.bfloat16,
                    "cuda")
        g = torch.Generator().manual_seed(1)
        prompts = [torch.randint(0, 250, (n,), generator=g) for n in lens]
        for rid, n in enumerate(lens):
            alloc.allocate(rid, n + steps)
        ctx = build_context(alloc, kv, ps.dcp, dec, [SeqChunk(r, 0, n) for r, n in enumerate(lens)],
                            model.cfg.kv_lora_rank)
        model.forward(torch.cat(prompts).cuda(), ctx.positions, ctx)
        runner = DecodeGraphs(model, alloc, kv, dec, model.cfg.kv_lora_rank, [len(lens)],
                              alloc.pages_for(max(lens) + steps), alloc.num_pages * PAGE) if graphs else None
        ids = torch.full((len(lens),), 7, dtype=torch.int64, device="cuda")
        logits = []
        for s in range(steps):
            chunks = [SeqChunk(r, n + s, 1) for r, n in enumerate(lens)]
            if runner is None:
                ctx = build_context(alloc, kv, ps.dcp, dec, chunks, model.cfg.kv_lora_rank)
                h = model.forward(ids, ctx.positions, ctx)
                assert ctx.layout.selected == "flashmla"
            else:
                h = runner.replay(ids, chunks)
            logits.append(model.logits(h).float().cpu())
        if runner is not None:
            assert set(runner.kernels.values()) == {"flashmla"}, runner.kernels
        out[graphs] = logits
    rel = [float((a - b).norm() / b.norm()) for a, b in zip(out[True], out[False])]
    assert max(rel) < 1e-2, rel
