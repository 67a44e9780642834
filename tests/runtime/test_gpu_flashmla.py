"""FlashMLA's own edges on an sm_90 GPU (skipped elsewhere): empty rows, partial pages, CUDA-graph replays.

The runtime never hands FlashMLA a zero-length row (flashmla.decode_rows reads one row and masks the lse to
-inf); what FlashMLA itself does with one is probed apart, in a process of its own with a time limit
(benchmarks/flashmla/zero_len_probe.py).  The through-the-merge exactness at DCP 1/2/4 is
tests/runtime/test_gpu_backends.py.
"""
import math

import pytest
import torch

from dcpctl.runtime.attention import flashmla, flashmla_setup

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0), reason="needs an sm_90 GPU")]

R, V, PAGE = 576, 512, 64
SCALE = 1 / math.sqrt(192)


@pytest.fixture(scope="module")
def mod():
    m, why = flashmla_setup.load()
    if m is None:
        pytest.skip(why)
    return m


def _case(heads, lens, pages_per_row=4):
    g = torch.Generator(device="cuda").manual_seed(7)
    pool = torch.randn(len(lens) * pages_per_row + 1, PAGE, R, device="cuda", generator=g).bfloat16()
    table = (1 + torch.randperm(len(lens) * pages_per_row, device="cuda", generator=g)).int().view(len(lens), -1)
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
    """What the decode graphs would need (graphs.py): the per-batch rows and metadata made inside the capture from
    device buffers, so a replay after the buffers change equals an eager call on the new lengths."""
    import types
    q, pool, table, lens = _case(128, [5, 300, 64, 0])
    lay = types.SimpleNamespace(block_table=table, row_req=torch.arange(4, dtype=torch.int32, device="cuda"),
                                local_lens=lens.clone(), backend_state={}, rows_are_chunks=True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        flashmla.flashmla_decode(q, pool, types.SimpleNamespace(**{**vars(lay), "backend_state": {}}), SCALE, V)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        got = flashmla.flashmla_decode(q, pool, lay, SCALE, V)
    lay.local_lens.copy_(torch.tensor([200, 1, 0, 256], dtype=torch.int32))
    g.replay()
    torch.cuda.synchronize()
    want = flashmla.run(q, pool, table, flashmla.decode_rows(lay.local_lens.clone(), 128), SCALE, V)
    assert torch.equal(got.o[[0, 1, 3]], want[0][[0, 1, 3]]) and torch.equal(got.lse, want[1])
