"""Oracle: our Kimi Linear (KDA + NoPE MLA, MoE) against transformers' KimiLinearForCausalLM on a tiny
random checkpoint written by save_pretrained, then the same checkpoint across DCP sizes.

transformers runs KDA's gates, recurrence, gated norm, norms and router in fp32 even for float64
models, and its own cached decode and uncached forward disagree by ~8e-7 relative in logprobs. So:
- against stock transformers: greedy ids equal, logprobs within 1e-6 relative (fp32 noise floor);
- against transformers with its fp32 casts lifted to float64 (test-only patch of the module's
  `torch.float32` and of Tensor.float): logprobs within 1e-12 relative, batched and chunked;
- DCP 1 / 2 / 4 on forked gloo ranks (TP 4 or the DCP size, ag_rs and a2a, replicated Q, EP,
  attention DP; the MLA layers in the absorbed form, or in the MHA form with small key blocks): greedy ids
  identical and logprobs within 1e-9 of DCP 1 absorbed, and every KDA pool empty and consistent after the
  releases.
"""
from __future__ import annotations

import types
from contextlib import contextmanager

import pytest
import torch

from dcpctl.runtime.models import load_model
from dcpctl.runtime.parallel import ParallelState
from tests.dist import run_ranks
from tests.runtime.configs import typed
from tests.runtime.hf_oracle import hf_decode, load_hf, max_rel_logprob_error, randomize
from tests.runtime.models.test_kimi_driver import dcp_ctx, kimi_greedy, ref_ctx
from tests.runtime.models.test_model_parallel import make_groups

transformers = pytest.importorskip("transformers")
modeling = pytest.importorskip("transformers.models.kimi_linear.modeling_kimi_linear")

CONFIG = dict(vocab_size=300, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
              num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=None,
              kv_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, num_experts=8,
              num_experts_per_tok=2, n_group=2, topk_group=1, n_shared_experts=1, routed_scaling_factor=2.446,
              first_k_dense_replace=1, rms_norm_eps=1e-5,
              linear_attn_config={"head_dim": 16, "num_heads": 4, "short_conv_kernel_size": 4,
                                  "full_attn_layers": [2, 4], "kda_layers": [1, 3]},
              pad_token_id=0, bos_token_id=1, eos_token_id=2)
PROMPTS = [[5, 17, 200, 3, 99, 42, 7], [250, 1, 2, 3]]
STEPS = 5


@pytest.fixture(scope="module")
def path(tmp_path_factory) -> str:
    model = transformers.KimiLinearForCausalLM(transformers.KimiLinearConfig(**CONFIG))
    randomize(model, seed=1)
    out = tmp_path_factory.mktemp("kimi_linear")
    model.save_pretrained(str(out))
    return str(out)


@pytest.fixture(scope="module")
def hf(path):
    return load_hf(path)


class _Float64Torch(types.ModuleType):
    float32 = torch.float64

    def __getattr__(self, name: str):
        return getattr(torch, name)


@contextmanager
def _fp32_lifted(monkeypatch):
    """transformers' Kimi Linear with every fp32 stage computed in float64 instead."""
    with monkeypatch.context() as m:
        m.setattr(modeling, "torch", _Float64Torch("torch"))
        m.setattr(torch.Tensor, "float", lambda self, *a, **k: self.to(torch.float64))
        yield


def _compare(model, hf, prompts, tol, chunk=None) -> None:
    pre, dec, outs = kimi_greedy(model, prompts, STEPS, ref_ctx(model), chunk=chunk)
    for i, prompt in enumerate(prompts):
        ref_pre, ref_dec = hf_decode(hf, prompt, outs[i][:-1])
        assert [int(ref_pre[-1].argmax())] + ref_dec.argmax(-1).tolist() == outs[i]
        rel = max_rel_logprob_error(torch.cat([pre[i], dec[i][:-1]]), torch.cat([ref_pre, ref_dec]))
        assert rel < tol, f"prompt {i}: logprob relative error {rel:.2e} >= {tol:.0e}"
    model.kda_pool.check_integrity()
    assert model.kda_pool.used == 0


@pytest.mark.parametrize("hf_numerics", [True, False])
def test_matches_stock_transformers(path, hf, hf_numerics):
    model = load_model(path, ParallelState.single(), False, torch.float64, hf_numerics=hf_numerics)
    for prompt in PROMPTS:  # one sequence at a time, as transformers runs it
        _compare(model, hf, [prompt], 1e-6)


def test_float64_matches_transformers_without_fp32_stages(path, hf, monkeypatch):
    model = load_model(path, ParallelState.single(), False, torch.float64)
    with _fp32_lifted(monkeypatch):
        _compare(model, hf, PROMPTS, 1e-12)  # both prompts in one batch
        _compare(model, hf, PROMPTS, 1e-12, chunk=3)  # chunked prefill continues the KDA state


# --- DCP: every layout equals DCP 1 ------------------------------------------------------------

DCP_PROMPTS = [[5, 17, 200, 3, 99, 42, 7, 11, 64], [250], [8, 3]]  # 1 and 2 tokens: shorter than dcp


def _rank(rank: int, world: int, path: str, groups: dict, dp: int, prompts: list, decisions: dict, chunk,
          form: str = "absorbed"):
    ps = ParallelState.build(groups, attn_dp_size=dp) if world > 1 else ParallelState.single()
    model = load_model(path, ps, typed(decisions).dcp_replicate_q_proj, torch.float64, kda_max_requests=4)
    make = dcp_ctx(model, ps, decisions, form=form, mha_block_bytes=MHA_BLOCK)
    pre, dec, outs = kimi_greedy(model, prompts[ps.attn_dp_index], STEPS, make, chunk=chunk)
    model.kda_pool.check_integrity()
    pool = (model.kda_pool.used, model.kda_pool.free)
    rows = int((make.pool.kv.abs().sum(-1) > 0).sum())  # latent rows this rank holds (all MLA layers)
    return [p.numpy() for p in pre], [d.numpy() for d in dec], outs, pool, rows


@pytest.fixture(scope="module")
def dcp1(path):
    return run_ranks(_rank, 1, path, None, 1, [DCP_PROMPTS], {}, None)[0]


MHA_BLOCK = 3 * 4 * (16 + 16 + 24) * 8   # the MHA form's key blocks: 3 rows of 4 kernel heads (float64)
CASES = {  # name: (world, dp, dcp, ep, decisions, prefill chunk, attention form)
    "tp2_dcp2_ag_rs": (2, 1, 2, 1, {"dcp_comm_backend": "ag_rs"}, None, "absorbed"),
    "tp4_dcp4_a2a_chunked": (4, 1, 4, 1, {"dcp_comm_backend": "a2a"}, 4, "absorbed"),
    "tp4_ep2_dcp2_replicated_q": (4, 1, 2, 2, {"dcp_comm_backend": "a2a", "dcp_replicate_q_proj": True}, None,
                                  "absorbed"),
    "tp4_dp2_dcp2": (4, 2, 2, 1, {"dcp_comm_backend": "ag_rs"}, None, "absorbed"),  # replicas step together
    "tp4_dcp4_a2a_chunked_mha_paged": (4, 1, 4, 1, {"dcp_comm_backend": "a2a", "attention_path": "paged"}, 4,
                                       "mha"),
    "tp4_dp2_dcp2_mha": (4, 2, 2, 1, {"dcp_comm_backend": "ag_rs"}, None, "mha"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_dcp_matches_dcp1(path, dcp1, case):
    world, dp, dcp, ep, decisions, chunk, form = CASES[case]
    split = [DCP_PROMPTS] if dp == 1 else [DCP_PROMPTS[:1], DCP_PROMPTS[1:]]
    mine = [[0, 1, 2]] if dp == 1 else [[0], [1, 2]]
    results = run_ranks(_rank, world, path, make_groups(world, dp=dp, dcp=dcp, ep=ep), dp, split, decisions,
                        chunk, form)
    want_pre, want_dec, want_outs = dcp1[:3]
    per_replica_rows = []
    for rank, (pre, dec, outs, pool, rows) in enumerate(results):
        replica = rank // (world // dp)
        assert pool == (0, 4)
        for j, i in enumerate(mine[replica]):
            assert outs[j] == want_outs[i]
            for got, want in ((pre[j], want_pre[i]), (dec[j], want_dec[i])):
                torch.testing.assert_close(torch.from_numpy(got), torch.from_numpy(want), rtol=1e-9,
                                           atol=1e-9)
        per_replica_rows.append(rows)
    # each DCP rank of a replica holds its stripe: local_len(L) rows per sequence and MLA layer
    for rank, rows in enumerate(per_replica_rows):
        replica, r = rank // (world // dp), rank % dcp
        lens = [len(DCP_PROMPTS[i]) + STEPS for i in mine[replica]]  # every generated id is fed back
        assert rows == 2 * sum(n // dcp + (r < n % dcp) for n in lens)
