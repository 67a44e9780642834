"""Every local attention backend through the DCP merge equals unsplit attention (GPU; skipped on CPU).

DCP c = 1, 2, 4 is simulated in one process on one GPU: each rank's shard is its own pool, filled with
the rows it owns (owner(p) = p mod c) through the allocator's pages; each rank's paged decode returns
(o, lse, base), and the merge (merge.merge_stacked) combines them.  Sequences shorter than c leave
empty shards; lengths off page multiples leave partial last pages; pad rows follow the requests.
Then the greedy ids of a tiny 512 + 64 latent model through the worker, per backend.
Numbers go to $DCPCTL_GPU_REPORT/<test>.json when that is set (tests/gpu_report.py;
`benchmarks/gpu.sh tests`).
"""
import math
import random

import pytest
import torch

from dcpctl.runtime.attention.layout import SeqChunk
from dcpctl.runtime.attention.merge import merge_stacked
from dcpctl.runtime.attention.paged import build_paged, paged_attention
from dcpctl.runtime.kv import KVPool, VirtualAllocator
from tests.gpu_report import report as _report
from tests.runtime.attention.needs import need_backend

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

R, V, PAGE = 576, 512, 64
SCALE = 1 / math.sqrt(192)
LENS = [1, 3, 64, 130, 1000, 4097]      # < c (empty shards), page multiples and partial last pages
BACKENDS = ["triton", "flashinfer", "flashmla"]


def _unsplit(q, kv, lens):
    # q: [B, H, R] fp32  kv: [B, Lmax, R] fp32 -> o [B, H, V], lse [B, H] natural
    outs, lses = [], []
    for b, n in enumerate(lens):
        s = q[b] @ kv[b, :n].T * SCALE
        lse = torch.logsumexp(s, -1)
        outs.append(torch.softmax(s, -1) @ kv[b, :n, :V])
        lses.append(lse)
    return torch.stack(outs), torch.stack(lses)


def _dcp_decode(q, kv, lens, c, backend):
    # each rank's shard in its own pool; decode the last position of every request; merge over ranks
    alloc = VirtualAllocator(8192, PAGE, c)
    for rid, n in enumerate(lens):
        alloc.allocate(rid, n)
    parts, ran = [], set()
    for r in range(c):
        pool = KVPool(1, (alloc.num_pages + 1) * PAGE, R, torch.bfloat16, "cuda")
        fill = build_paged(alloc, [SeqChunk(rid, 0, n) for rid, n in enumerate(lens)], r, PAGE, "cuda")
        flat = torch.cat([kv[b, :n] for b, n in enumerate(lens)]).to(torch.bfloat16)
        pool.write(0, fill.write_slots, flat.index_select(0, fill.write_rows))
        lay = build_paged(alloc, [SeqChunk(rid, n - 1, 1) for rid, n in enumerate(lens)], r, PAGE, "cuda",
                          pad=2)
        qq = torch.cat([q, q[:2]]).to(torch.bfloat16)          # two pad rows after the requests
        res = paged_attention(qq, pool.kv[0], lay, SCALE, V, r, c, requested=backend)
        ran.add(lay.selected)
        parts.append((res.o[:len(lens)].float(), res.lse[:len(lens)].float(), res.base))
    bases = {p[2] for p in parts}
    assert len(bases) == 1, bases
    m = merge_stacked(torch.stack([p[0] for p in parts]), torch.stack([p[1] for p in parts]), bases.pop())
    return m.o, m.lse, ran


@pytest.mark.parametrize("heads", [16, 128])   # FlashMLA: 16 heads fill a quarter of its 64-row tile
@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_through_merge_equals_unsplit(backend, heads):
    need_backend(backend, heads)
    g = torch.Generator(device="cuda").manual_seed(heads)
    q = torch.randn(len(LENS), heads, R, device="cuda", generator=g)
    kv = torch.randn(len(LENS), max(LENS), R, device="cuda", generator=g).bfloat16().float()
    q = q.bfloat16().float()
    want_o, want_lse = _unsplit(q, kv, LENS)
    doc = {}
    for c in (1, 2, 4):
        o, lse, ran = _dcp_decode(q, kv, LENS, c, backend)
        assert ran == {backend}, ran
        doc[c] = {"o_rel": float((o - want_o).norm() / want_o.norm()),
                  "lse_abs": float((lse - want_lse).abs().max())}
    _report(f"exact_{backend}_{heads}", doc)
    for c, d in doc.items():
        assert d["o_rel"] < 1e-2 and d["lse_abs"] < 2e-2, (c, doc)


LATENT = {"hidden_size": 256, "num_attention_heads": 16, "num_key_value_heads": 16, "q_lora_rank": 128,
          "kv_lora_rank": 512, "qk_nope_head_dim": 32, "qk_rope_head_dim": 64, "v_head_dim": 32,
          "intermediate_size": 256, "num_hidden_layers": 2, "first_k_dense_replace": 2}


@pytest.fixture(scope="module")
def latent_path(tmp_path_factory):
    from dcpctl.runtime.tiny import write_tiny_model
    return write_tiny_model(tmp_path_factory.mktemp("latent") / "model", **LATENT)


def _greedy(path, backend, reqs):
    # -> [(output_ids, output_logprobs)] per request
    from dcpctl.runtime.worker import run_worker
    from tests.runtime.configs import config
    from tests.runtime.engine.test_engine import launch_cfg
    cfg = launch_cfg(1, 1, capacity=8192, chunk=256)
    cfg["device"], cfg["model"]["dtype"], cfg["model"]["path"] = "cuda", "bfloat16", str(path)
    cfg["kv"]["page_size"] = PAGE
    cfg["decisions"]["attention_backend"] = backend
    return [(o["output_ids"], o["output_logprobs"]) for o in run_worker(config(cfg), reqs)["outputs"]]


TIE = 0.1   # |log p| apart: what two bf16 runs of this random model may differ by (kernel rounding only)


@pytest.mark.parametrize("other", ["flashinfer", "flashmla"])
def test_greedy_ids_equal_across_backends(latent_path, other):
    """Greedy ids equal, except where the two backends' picks are a near-tie: there both chosen tokens have
    log-probabilities within TIE of each other (a random model's top-2 logits can be closer than bf16 noise).
    Before the divergence the ids are equal and the log-probabilities agree within TIE; a wrong kernel fails
    both."""
    need_backend(other)
    rng = random.Random(0)
    reqs = [{"prompt_ids": [rng.randrange(4, 256) for _ in range(rng.randrange(2, 300))],
             "max_new_tokens": 16, "temperature": 0, "ignore_eos": True, "logprobs": True} for _ in range(16)]
    got = {b: _greedy(latent_path, b, reqs) for b in ("triton", other)}
    rows = []
    for (ia, la), (ib, lb) in zip(got["triton"], got[other]):
        k = next((j for j in range(len(ia)) if ia[j] != ib[j]), len(ia))
        gap = max([abs(x - y) for x, y in zip(la[:k + 1], lb[:k + 1])] + [0.0])
        rows.append({"diverges_at": None if k == len(ia) else k, "max_logprob_gap": gap})
    same = sum(r["diverges_at"] is None for r in rows)
    _report(f"greedy_triton_vs_{other}", {"of": len(reqs), "tokens": 16, "equal": same, "rows": rows,
                                       "ids": {b: [g[0] for g in v] for b, v in got.items()}})
    assert all(r["max_logprob_gap"] < TIE for r in rows), rows
    assert same >= len(reqs) - 2, f"{same} of {len(reqs)} greedy sequences equal: {rows}"
