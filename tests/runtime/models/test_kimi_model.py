"""Kimi Linear pieces without transformers: the KDA state pool, the two delta-rule forms, config
parsing, the tiny checkpoint (runtime and planner), and request bookkeeping through the model."""
from __future__ import annotations

import json

import pytest
import torch

from dcpctl.plan.model import spec_from_path
from dcpctl.runtime.attention.dcp import SeqChunk
from dcpctl.runtime.models import KdaPoolError, KdaStatePool, ModelLoadError, load_model, read_config
from dcpctl.runtime.models.deepseek import DeepseekModel
from dcpctl.runtime.models.kda_ops import CHUNK, chunked_kda, recurrent_kda
from dcpctl.runtime.models.kimi_config import KDA, MLA, parse_kimi_linear
from dcpctl.runtime.parallel import ParallelState
from dcpctl.runtime.tiny_kimi import tiny_kimi_config, write_tiny_kimi_model
from tests.runtime.models.test_kimi_driver import kimi_greedy, ref_ctx

PROMPTS = [[256, 72, 101, 108, 108, 111, 9, 14], [256, 1], [33, 2, 200]]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return str(write_tiny_kimi_model(tmp_path_factory.mktemp("tiny_kimi")))


@pytest.fixture(scope="module")
def model(tiny):
    return load_model(tiny, ParallelState.single(), False, torch.float64, kda_max_requests=4)


# --- state pool ---------------------------------------------------------------------------------

def _pool(n: int = 3) -> KdaStatePool:
    return KdaStatePool(n, kda_layers=2, heads=2, head_dim=4, conv_kernel=3, dtype=torch.float64,
                        state_dtype=torch.float64)


def test_pool_admit_release_counts():
    pool = _pool()
    assert pool.can_admit(3) and not pool.can_admit(4)
    assert [pool.admit(r) for r in (7, 8, 9)] == [0, 1, 2]
    assert (pool.used, pool.free, pool.can_admit()) == (3, 0, False)
    with pytest.raises(KdaPoolError, match=r"request 5: no free KDA state slot: used\(3\) = slots\(3\)"):
        pool.admit(5)
    pool.release(8)
    assert pool.admit(5) == 1  # lowest free slot: identical on every rank
    with pytest.raises(KdaPoolError, match="request 5 is already admitted"):
        pool.admit(5)
    with pytest.raises(KdaPoolError, match=r"release of unknown request 8; admitted: \[5, 7, 9\]"):
        pool.release(8)
    pool.check_integrity()
    assert pool.conv.shape == (2, 3, 2, 24) and pool.rec.shape == (2, 3, 2, 4, 4)
    assert pool.nbytes_per_request() == 2 * (2 * 24 + 2 * 16) * 8


def test_pool_integrity_names_every_term():
    pool = _pool()
    pool.admit(1)
    pool._free.append(0)
    with pytest.raises(KdaPoolError, match=r"^free\(3\) \+ used\(1\) != slots\(3\)$"):
        pool.check_integrity()
    pool._free.remove(1)
    with pytest.raises(KdaPoolError, match=r"distinct_slots\(2\) != slots\(3\)"):
        pool.check_integrity()


def test_pool_batch_checks_continuity():
    pool = _pool()
    pool.admit(0)
    pool.admit(1)
    b = pool.batch([SeqChunk(0, 0, 3), SeqChunk(1, 0, 1)], num_tokens=6)
    assert b.slots.tolist() == [0, 1] and b.fresh.tolist() == [True, True] and b.max_len == 3
    assert b.flat.tolist() == [0, 1, 2, 3]
    b = pool.batch([SeqChunk(1, 1, 2), SeqChunk(0, 3, 1)], num_tokens=3)
    assert b.fresh.tolist() == [False, False] and b.flat.tolist() == [0, 1, 2]
    with pytest.raises(KdaPoolError,
                       match=r"request 0: chunk starts at position 2 but its KDA state holds 4"):
        pool.batch([SeqChunk(0, 2, 1)], 1)
    with pytest.raises(KdaPoolError, match="request 3 has no KDA state slot: admit it"):
        pool.batch([SeqChunk(3, 0, 1)], 1)
    with pytest.raises(KdaPoolError, match="request 1 appears twice"):
        pool.batch([SeqChunk(1, 3, 1), SeqChunk(1, 4, 1)], 2)
    assert pool.batch([SeqChunk(0, 0, 2)], 2).fresh.tolist() == [True]  # start 0 restarts the state


# --- delta rule ---------------------------------------------------------------------------------

def test_chunked_equals_recurrent_across_chunks_with_padding():
    g = torch.Generator().manual_seed(3)
    n, L, H, dk, dv = 2, CHUNK + 9, 2, 4, 3
    q, k = (torch.nn.functional.normalize(torch.randn(n, L, H, dk, generator=g, dtype=torch.float64), dim=-1)
            for _ in range(2))
    v = torch.randn(n, L, H, dv, generator=g, dtype=torch.float64)
    gate = -torch.rand(n, L, H, dk, generator=g, dtype=torch.float64)
    beta = torch.rand(n, L, H, generator=g, dtype=torch.float64)
    gate[1, 50:], beta[1, 50:] = 0, 0  # span 1 is 50 steps long: its pad steps must keep S
    S0 = torch.randn(n, H, dk, dv, generator=g, dtype=torch.float64)
    o_r, S_r = recurrent_kda(q, k, v, gate, beta, S0)
    o_c, S_c = chunked_kda(q, k, v, gate, beta, S0)
    torch.testing.assert_close(o_c, o_r, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(S_c, S_r, rtol=1e-12, atol=1e-12)
    _, S_50 = recurrent_kda(q[1:, :50], k[1:, :50], v[1:, :50], gate[1:, :50], beta[1:, :50], S0[1:])
    torch.testing.assert_close(S_c[1:], S_50, rtol=1e-12, atol=1e-12)


# --- config -------------------------------------------------------------------------------------

def test_layer_kinds_from_layer_types_or_one_indexed_lists():
    by_lists = parse_kimi_linear(tiny_kimi_config())
    types = ["linear_attention", "full_attention", "linear_attention", "full_attention"]
    by_types = parse_kimi_linear(tiny_kimi_config(layer_types=types, linear_attn_config={"num_heads": 8,
                                                                                          "head_dim": 8}))
    assert by_lists.layer_kinds == by_types.layer_kinds == (KDA, MLA, KDA, MLA)
    assert by_lists.mla_layers == (1, 3) and by_lists.kda_layers == (0, 2)
    assert by_lists.moe_layers == {1, 2, 3} and by_lists.kda.num_heads == 8
    only_full = parse_kimi_linear(tiny_kimi_config(linear_attn_config={"full_attn_layers": [4]}))
    assert only_full.layer_kinds == (KDA, KDA, KDA, MLA)
    mla = by_lists.mla
    assert (mla.n_routed_experts, mla.top_k, mla.n_group, mla.norm_topk_prob, mla.topk_method) == \
        (8, 2, 2, True, "noaux_tc")


@pytest.mark.parametrize("overrides,message", [
    ({"linear_attn_config": {"num_heads": 8}},
     "names no layer kinds: give layer_types or linear_attn_config"),
    ({"linear_attn_config": {"full_attn_layers": [2, 4], "kda_layers": [1, 2]}},
     r"full_attn_layers \[2, 4\] and kda_layers \[1, 2\] must cover layers 1..4 \(1-indexed\) exactly once"),
    ({"linear_attn_config": {"full_attn_layers": [0, 4]}}, "must cover layers 1..4"),
    ({"layer_types": ["linear_attention"] * 3}, r"len\(layer_types\) \(3\) != num_hidden_layers \(4\)"),
    ({"mla_use_nope": False}, "mla_use_nope=false"),
    ({"hidden_act": "gelu"}, "hidden_act 'gelu' is not supported"),
    ({"quantization_config": {"quant_method": "fp8"}}, "quantized checkpoints are not supported"),
])
def test_config_errors_are_one_clear_sentence(overrides, message):
    with pytest.raises(ModelLoadError, match=message):
        parse_kimi_linear(tiny_kimi_config(**overrides))


def test_tiny_checkpoint_is_deterministic_and_readable_by_the_planner(tiny, tmp_path):
    again = write_tiny_kimi_model(tmp_path / "again")
    assert (again / "model.safetensors").read_bytes() == (tmp_path / ".." / tiny
                                                          / "model.safetensors").read_bytes()
    spec = spec_from_path(tiny)
    assert spec.is_hybrid and spec.mla_layers == (1, 3) and spec.kda_layers == (0, 2)
    assert (spec.kda.num_heads, spec.kda.head_dim, spec.kda.conv_kernel) == (8, 8, 4) and not spec.uses_rope
    assert read_config(tiny).num_layers == 4  # the MLA part of a hybrid config


def test_unsupported_tensor_shape_is_a_load_error(tmp_path):
    d = write_tiny_kimi_model(tmp_path / "m")
    cfg = json.loads((d / "config.json").read_text())
    cfg["linear_attn_config"]["head_dim"] = 4
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match=r"q_proj.weight in model.safetensors has shape \[64, 64\], "
                                             r"expected \[32, 64\]"):
        load_model(d, ParallelState.single(), False, torch.float64)


# --- the model's request bookkeeping --------------------------------------------------------------

def test_chunked_prefill_and_batching_equal_one_request_at_a_time(model):
    alone = [kimi_greedy(model, [p], 4, ref_ctx(model)) for p in PROMPTS]
    for chunk in (None, 3):
        pre, dec, outs = kimi_greedy(model, PROMPTS, 4, ref_ctx(model), chunk=chunk)
        for i, (a_pre, a_dec, a_outs) in enumerate(alone):
            assert outs[i] == a_outs[0]
            torch.testing.assert_close(pre[i], a_pre[0], rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(dec[i], a_dec[0], rtol=1e-12, atol=1e-12)
    model.kda_pool.check_integrity()
    assert (model.kda_pool.used, model.kda_pool.free) == (0, 4)


def test_forward_needs_admission_and_chunks(model):
    ids = torch.tensor([5, 6])
    make = ref_ctx(model)
    with pytest.raises(KdaPoolError, match="request 0 has no KDA state slot"):
        model.forward(ids, torch.tensor([0, 1]), make([SeqChunk(0, 0, 2)]))
    with pytest.raises(TypeError, match="hybrid .KDA. models need ctx.layout.chunks or ctx.chunks"):
        model.forward(ids, torch.tensor([0, 1]), object())
    model.kda_pool.admit(0)
    try:
        empty = model.forward(torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), make([]))
        assert empty.shape == (0, model.cfg.hidden_size)
        with pytest.raises(RuntimeError,
                           match="cannot resize the KDA state pool while 1 requests hold slots"):
            model.set_kda_capacity(8)
    finally:
        model.release(0)
    model.set_kda_capacity(4)
    assert model.kv_layers == 2 and DeepseekModel.kda_pool is None


def test_flat_a_log_checkpoints_load_the_same(tiny, model, tmp_path):
    from safetensors.torch import load_file, save_file
    d = write_tiny_kimi_model(tmp_path / "flat")
    tensors = load_file(str(d / "model.safetensors"))
    for name in [n for n in tensors if n.endswith("A_log")]:
        tensors[name] = tensors[name].flatten()  # [1, 1, H, 1] -> [H], as FLA-style checkpoints
    save_file(tensors, str(d / "model.safetensors"))
    flat = load_model(d, ParallelState.single(), False, torch.float64, kda_max_requests=4)
    a, b = (kimi_greedy(model, PROMPTS[:1], 2, ref_ctx(model)),
            kimi_greedy(flat, PROMPTS[:1], 2, ref_ctx(flat)))
    assert a[2] == b[2]
    torch.testing.assert_close(a[1][0], b[1][0], rtol=0, atol=0)
