"""The MHA form of MLA attention (attention/mha.py, form.py) against unsplit attention and the absorbed form.

- one chunk's block / staircase decomposition on one rank equals dense masked attention over the rank's
  stripe (every DCP size, prefix, chunk length and key block size, float64, 1e-12);
- the per-chunk rule picks MHA for long prefills and extends, absorbed for decode and short extends;
- the tiny DeepSeek model through the real DCP context (forked gloo ranks: DCP 1 / 2 / 4, ag_rs and a2a,
  chunked, paged, attention DP, replicated Q): greedy ids identical and logits within 1e-9 of DCP 1 in the
  absorbed form, and the MHA form reproduces transformers (float64, HF's fp32 stages) within 1e-9;
- a mixed batch (decodes, a fresh prefill, a short and a long extend, interleaved) split between the forms in
  one layer call: the same logits (1e-9) and greedy ids as everything absorbed at DCP 1, at DCP 1 and 2.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from dcpctl.plan.hf_config import MlaShape
from dcpctl.runtime.attention.form import form_costs, pick_form
from dcpctl.runtime.attention.layout import SeqChunk
from dcpctl.runtime.attention.backends.mha_torch import reference_kernel
from dcpctl.runtime.attention.mha import chunk_attention
from dcpctl.runtime.models import load_model
from dcpctl.runtime.models.loader import read_config
from dcpctl.runtime.parallel import ParallelState
from dcpctl.runtime.tiny import write_tiny_model
from tests.dist import run_ranks
from tests.runtime.configs import typed
from tests.runtime.models.test_kimi_driver import dcp_ctx, kimi_greedy
from tests.runtime.models.test_model_parallel import make_groups

H, L, ROPE, NOPE, V = 3, 8, 4, 5, 6


def _dense(q, K, V_, own, start, scale):
    # q: [T, H, qk]  K/V_: [S, H, *] the whole sequence's keys  own: this rank's positions -> o, lse (-inf:
    # none)
    s = torch.einsum("thd,shd->ths", q, K[own]) * scale
    mask = torch.tensor(own)[None, :] <= torch.arange(start, start + q.shape[0])[:, None]
    s = s.masked_fill(~mask[:, None, :], -math.inf)
    return torch.einsum("ths,shv->thv", torch.softmax(s, -1).nan_to_num(0), V_[own]), torch.logsumexp(s, -1)


@pytest.mark.parametrize("c", [1, 2, 3, 4])
@pytest.mark.parametrize("start,T,block",
                         [(0, 11, 100), (0, 11, 2), (7, 9, 3), (13, 1, 2), (5, 6, 1), (2, 1, 4)])
def test_chunk_decomposition_equals_dense_masked_attention(c, start, T, block):
    g = torch.Generator().manual_seed(c * 100 + start)
    end = start + T
    rows = torch.randn(end, L + ROPE, generator=g, dtype=torch.float64)
    w = torch.randn(H, NOPE + V, L, generator=g, dtype=torch.float64)
    q = torch.randn(T, H, NOPE + ROPE, generator=g, dtype=torch.float64)
    K = torch.cat([torch.einsum("sl,hnl->shn", rows[:, :L], w[:, :NOPE]),
                   rows[:, L:].unsqueeze(1).expand(-1, H, -1)], -1)
    V_ = torch.einsum("sl,hvl->shv", rows[:, :L], w[:, NOPE:])
    for r in range(c):
        own = list(range(r, end, c))
        o_ref, lse_ref = _dense(q, K, V_, own, start, 0.3)
        o = torch.zeros(T, H, V, dtype=torch.float64)
        lse = torch.full((T, H), -math.inf, dtype=torch.float64)
        mine = rows[own]
        chunk_attention(q, lambda a, b: mine[a:b], w, NOPE, L, start, sum(p < start for p in own), len(own),
                        r, c, 0.3, reference_kernel, block, o, lse)
        seen = torch.isfinite(lse_ref)
        assert torch.equal(seen, torch.isfinite(lse)), f"rank {r}: rows that see a key differ"
        torch.testing.assert_close(lse[seen], lse_ref[seen], rtol=0, atol=1e-12)
        torch.testing.assert_close(o[seen], o_ref[seen], rtol=0, atol=1e-12)
        assert torch.equal(o[~seen], torch.zeros_like(o[~seen]))


V3 = MlaShape(hidden_size=7168, num_layers=61, num_heads=128, q_lora_rank=1536, kv_lora_rank=512,
              qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, vocab_size=129280,
              intermediate_size=18432, moe_intermediate_size=2048, n_routed_experts=256, n_shared_experts=1)


@pytest.mark.parametrize("chunks,mha", [
    # a fresh prompt: from 341 tokens
    ([SeqChunk(0, 0, 340)], [False]), ([SeqChunk(0, 0, 341)], [True]),
    # an extend: ~171 new tokens
    ([SeqChunk(0, 100_000, 170)], [False]), ([SeqChunk(0, 100_000, 172)], [True]),
    # decode at 128K
    ([SeqChunk(i, 131_072, 1) for i in range(64)], [False] * 64),
    # mixed: split
    ([SeqChunk(0, 0, 8192)] + [SeqChunk(i, 4096, 1) for i in range(1, 3)], [True, False, False]),
    # long decodes
    ([SeqChunk(i, 32_768, 1) for i in range(1, 9)] + [SeqChunk(0, 0, 8192)], [False] * 8 + [True]),
])
def test_rule_picks_mha_per_chunk_for_long_prefills_and_absorbed_for_decode(chunks, mha):
    forms, why = pick_form("auto", chunks, V3)
    assert forms == mha == [form_costs([ch], V3)[1] < form_costs([ch], V3)[0] for ch in chunks]
    kind = "split" if any(mha) and not all(mha) else "MHA" if all(mha) else "absorbed"
    assert why.startswith(f"attention form: {kind} ")
    assert pick_form("absorbed", chunks, V3) == ([False] * len(chunks),
                                                 "attention form: absorbed (asked for)")
    with pytest.raises(ValueError, match="valid: \\['auto', 'absorbed', 'mha'\\]"):
        pick_form("latent", chunks, V3)


PROMPTS = [[256, 72, 101, 108, 108, 111, 9, 44, 3, 17, 200, 5, 6], [256, 1, 2, 3, 200], [256, 33]]
STEPS = 3
MHA_BLOCK = 3 * 16 * (16 + 16 + 24) * 8   # key blocks of 3 rows at 16 kernel heads (float64): the block loop
                                          # runs


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(write_tiny_model(tmp_path_factory.mktemp("tiny")))


def _rank(rank: int, world: int, path: str, groups: dict, dp: int, prompts: list, decisions: dict, chunk,
          form):
    ps = ParallelState.build(groups, attn_dp_size=dp) if world > 1 else ParallelState.single()
    model = load_model(path, ps, typed(decisions).dcp_replicate_q_proj, torch.float64)
    make = dcp_ctx(model, ps, decisions, form=form, mha_block_bytes=MHA_BLOCK)
    pre, dec, outs = kimi_greedy(model, prompts[ps.attn_dp_index], STEPS, make, chunk=chunk)
    return [p.numpy() for p in pre], [d.numpy() for d in dec], outs


@pytest.fixture(scope="module")
def absorbed(tiny):
    return run_ranks(_rank, 1, tiny, None, 1, [PROMPTS], {}, None, "absorbed")[0]


CASES = {  # name: (world, dp, dcp, decisions, prefill chunk, form)
    "dcp1_mha": (1, 1, 1, {}, None, "mha"),
    "dcp1_mha_paged_chunked": (1, 1, 1, {"attention_path": "paged"}, 5, "mha"),
    "tp2_dcp2_ag_rs_mha": (2, 1, 2, {"dcp_comm_backend": "ag_rs"}, None, "mha"),
    "tp4_dcp4_a2a_mha_chunked_paged": (4, 1, 4, {"dcp_comm_backend": "a2a", "attention_path": "paged"}, 4,
                                       "mha"),
    "tp4_dcp2_a2a_replicated_q_mha": (4, 1, 2, {"dcp_comm_backend": "a2a", "dcp_replicate_q_proj": True}, 3,
                                      "mha"),
    "tp4_dp2_dcp2_mha": (4, 2, 2, {"dcp_comm_backend": "ag_rs"}, None, "mha"),
    "tp4_dcp4_a2a_auto": (4, 1, 4, {"dcp_comm_backend": "a2a"}, None, "auto"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_mha_form_matches_absorbed_dcp1(tiny, absorbed, case):
    world, dp, dcp, decisions, chunk, form = CASES[case]
    split = [PROMPTS] if dp == 1 else [PROMPTS[:1], PROMPTS[1:]]
    mine = [[0, 1, 2]] if dp == 1 else [[0], [1, 2]]
    groups = make_groups(world, dp=dp, dcp=dcp) if world > 1 else None
    results = run_ranks(_rank, world, tiny, groups, dp, split, decisions, chunk, form)
    for rank, (pre, dec, outs) in enumerate(results):
        for j, i in enumerate(mine[rank // (world // dp)]):
            assert outs[j] == absorbed[2][i]
            for got, want in ((pre[j], absorbed[0][i]), (dec[j], absorbed[1][i])):
                torch.testing.assert_close(torch.from_numpy(got), torch.from_numpy(want), rtol=1e-9,
                                           atol=1e-9)


# the mixed step, rows interleaved: decode (13 cached), a fresh 70-token prefill (MHA: the tiny shape's fresh
# threshold is 64), decode (5 cached), a short extend (absorbed) and a long one over 5 cached tokens (MHA)
FIRST = [SeqChunk(0, 0, 13), SeqChunk(1, 0, 5), SeqChunk(3, 0, 6), SeqChunk(4, 0, 5)]
MIXED = [SeqChunk(0, 13, 1), SeqChunk(2, 0, 70), SeqChunk(1, 5, 1), SeqChunk(3, 6, 4), SeqChunk(4, 5, 66)]
MIXED_FORMS = [False, True, False, False, True]


def _mixed_rank(rank: int, world: int, path: str, groups: dict, decisions: dict, form: str):
    ps = ParallelState.build(groups) if world > 1 else ParallelState.single()
    model = load_model(path, ps, False, torch.float64)
    make = dcp_ctx(model, ps, decisions, capacity=256, form=form, mha_block_bytes=MHA_BLOCK)
    gen = torch.Generator().manual_seed(7)
    out, forms, picked = [], [], []
    for chunks in (FIRST, MIXED, [SeqChunk(c.rid, c.start + c.num_tokens, 1) for c in MIXED]):
        ids = (torch.randint(1, 250, (sum(c.num_tokens for c in chunks),), generator=gen) if len(out) < 2 else
               torch.tensor(picked[-1]))                 # the decode after the mixed step reads the rows it
                                                         # wrote
        ctx = make(chunks)
        out.append(model.logits(model.forward(ids, ctx.positions, ctx)))
        forms.append(list(ctx._forms))
        last = torch.tensor([c.num_tokens for c in chunks]).cumsum(0) - 1
        greedy = out[-1][last].argmax(-1).tolist()
        picked.append(greedy)
    return [o.numpy() for o in out], picked, forms[1]


MIXED_CASES = {  # name: (world, dcp, decisions)
    "dcp1": (1, 1, {}),
    "dcp1_paged": (1, 1, {"attention_path": "paged"}),
    "tp2_dcp2_ag_rs": (2, 2, {"dcp_comm_backend": "ag_rs"}),
    "tp2_dcp2_a2a_paged": (2, 2, {"dcp_comm_backend": "a2a", "attention_path": "paged"}),
}


@pytest.mark.parametrize("case", sorted(MIXED_CASES))
def test_mixed_batch_splits_forms_and_matches_absorbed(tiny, case):
    world, dcp, decisions = MIXED_CASES[case]
    want, want_ids, want_forms = run_ranks(_mixed_rank, 1, tiny, None, {}, "absorbed")[0]
    assert want_forms == [False] * len(MIXED)
    groups = make_groups(world, dp=1, dcp=dcp) if world > 1 else None
    for got, ids, forms in run_ranks(_mixed_rank, world, tiny, groups, decisions, "auto"):
        assert forms == MIXED_FORMS == pick_form("auto", MIXED, read_config(Path(tiny)))[0]
        assert ids == want_ids
        for g, w in zip(got, want):
            torch.testing.assert_close(torch.from_numpy(g), torch.from_numpy(w), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("t", [1, 127, 130, 341, 1000])
@pytest.mark.parametrize("causal", [True, False])
def test_bucketed_rows_are_exact(t, causal):
    """Padding a call's rows to the kernel's plan buckets changes no output row (causal: zero keys after the
    last real one are masked; unmasked: only queries are padded), and the buckets are a short ladder."""
    from dcpctl.runtime.attention.backends.mha_cudnn import bucket, bucketed
    g = torch.Generator().manual_seed(t)
    s = t if causal else 77
    q, k, v = (torch.randn(n, 3, d, generator=g, dtype=torch.float64) for n, d in ((t, 8), (s, 8), (s, 4)))
    want = reference_kernel(q, k, v, causal, 0.3)
    got = bucketed(reference_kernel)(q, k, v, causal, 0.3)
    assert got[0].shape == want[0].shape and got[1].shape == want[1].shape
    assert torch.allclose(got[0], want[0], atol=1e-12) and torch.allclose(got[1], want[1], atol=1e-12)
    assert 0 <= bucket(t) - t < max(128, t / 8)
    assert len({bucket(n) for n in range(1, 8193)}) <= 48


@pytest.mark.parametrize("s", [5, 15, 16, 63, 64, 100, 128, 200, 257])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("step", [16, 128])
def test_quantized_keys_are_exact(s, causal, step):
    """An unmasked call split into keys in multiples of the quantum, then of the step (both the plan-building
    kernel) and the rest (the other kernel), merged by LSE, equals one call; a causal square and an exact
    multiple of the quantum go whole to the first; a step above the quantum cuts nothing more."""
    from dcpctl.runtime.attention.backends.mha_cudnn import keyed
    g = torch.Generator().manual_seed(s + causal)
    t = s if causal else 37
    q, k, v = (torch.randn(n, 3, d, generator=g, dtype=torch.float64) for n, d in ((t, 8), (s, 8), (s, 4)))
    seen: list[tuple[str, int]] = []

    def named(name):
        def run(q, k, v, c, scale):
            seen.append((name, k.shape[0]))
            return reference_kernel(q, k, v, c, scale)
        return run
    want = reference_kernel(q, k, v, causal, 0.3)
    got = keyed(named("plan"), named("rest"), quantum=64, step=step)(q, k, v, causal, 0.3)
    assert torch.allclose(got[0], want[0], atol=1e-12) and torch.allclose(got[1], want[1], atol=1e-12)
    main = s - s % 64
    mid = max(main, s - s % step)
    if causal or main == s:
        assert seen == [("plan", s)]
    else:
        assert seen == [(n, b - a)
                        for n, a, b in (("plan", 0, main), ("plan", main, mid), ("rest", mid, s)) if b > a]
