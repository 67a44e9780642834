"""Oracle: our absorbed-MLA model against Hugging Face transformers on tiny random checkpoints (float64).

With hf_numerics=True (norms, rope angles, router in fp32 as HF does) logits must agree to ~1e-12;
in the default float64 mode (everything float64) greedy ids agree and logprobs to ~1e-6 relative.
The MHA form (long prefills; here pinned, through the real DCP context) agrees with HF to 1e-9.
"""
from __future__ import annotations

import pytest
import torch

from dcpctl.runtime.models import load_model
from dcpctl.runtime.parallel import ParallelState
from tests.runtime.hf_oracle import hf_decode, load_hf, max_rel_logprob_error, randomize
from tests.runtime.ref_context import greedy_run
from tests.runtime.models.test_kimi_driver import dcp_ctx, kimi_greedy

transformers = pytest.importorskip("transformers")

YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 512,
        "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}
COMMON = dict(vocab_size=300, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
              num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=8, kv_lora_rank=32,
              qk_rope_head_dim=8, v_head_dim=16, qk_nope_head_dim=16, first_k_dense_replace=1,
              max_position_embeddings=2048, n_routed_experts=8, num_experts_per_tok=2)
PROMPTS = [[5, 17, 200, 3, 99, 42, 7], [250, 1, 2, 3]]
STEPS = 5


def _save(kind: str, path, **extra) -> str:
    if kind == "v3":
        extra.setdefault("rope_parameters", dict(YARN))
        cfg = transformers.DeepseekV3Config(**COMMON, q_lora_rank=32, n_shared_experts=1, n_group=2,
                                            topk_group=1, **extra)
        model = transformers.DeepseekV3ForCausalLM(cfg)
    else:
        v2 = dict(q_lora_rank=None, n_shared_experts=2, n_group=4, topk_group=2,
                  topk_method="group_limited_greedy", routed_scaling_factor=1.5,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
        cfg = transformers.DeepseekV2Config(**COMMON, **{**v2, **extra})
        model = transformers.DeepseekV2ForCausalLM(cfg)
    randomize(model, seed=1)
    model.save_pretrained(str(path))
    return str(path)


PLAIN = {"rope_type": "default", "rope_theta": 10000.0}
V2_LITE_YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                "original_max_position_embeddings": 64, "beta_fast": 32, "beta_slow": 1, "mscale": 0.707,
                "mscale_all_dim": 0.707}
CASES = {"v3_yarn_moe": ("v3", {}),
         "v3_plain_rope": ("v3", {"rope_interleave": False, "rope_parameters": PLAIN}),
         "v2_direct_q_group_limited": ("v2", {}),
         "v2_lite_greedy_yarn": ("v2", {"topk_method": "greedy", "n_group": None, "topk_group": None,
                                        "rope_parameters": V2_LITE_YARN})}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, tmp_path_factory):
    kind, extra = CASES[request.param]
    path = _save(kind, tmp_path_factory.mktemp(request.param), **dict(extra))
    return path, load_hf(path)


def _check_ids(hf, prompt: list[int], out: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    ref_pre, ref_dec = hf_decode(hf, prompt, out[:-1])
    assert [int(ref_pre[-1].argmax())] + ref_dec.argmax(-1).tolist() == out
    return ref_pre, ref_dec


def test_bitwise_with_hf_numerics_one_sequence_at_a_time(case):
    # same shapes as HF and fp32 norms/rope/router: the absorbed form must reproduce HF to ~1 ulp.
    # V2 only to fp32 precision: HF rotates it as complex64 with torch.polar, whose cos/sin differ
    # from Tensor.cos/sin by 1 ulp.
    path, hf = case
    tol = 2e-6 if "v2" in path.rsplit("/", 1)[-1] else 1e-12
    ours = load_model(path, ParallelState.single(), False, torch.float64, "cpu", hf_numerics=True)
    for prompt in PROMPTS:
        pre, dec, outs = greedy_run(ours, [prompt], STEPS)
        ref_pre, ref_dec = _check_ids(hf, prompt, outs[0])
        torch.testing.assert_close(torch.cat([pre[0], dec[0][:-1]]), torch.cat([ref_pre, ref_dec]),
                                   rtol=tol, atol=tol)


def test_float64_batched_matches_hf(case):
    # default float64 mode keeps everything in float64; HF rounds norms/rope/router to fp32
    path, hf = case
    ours = load_model(path, ParallelState.single(), False, torch.float64, "cpu")
    pre, dec, outs = greedy_run(ours, PROMPTS, STEPS)  # both prompts in one batch, then batched decode
    for i, prompt in enumerate(PROMPTS):
        ref_pre, ref_dec = _check_ids(hf, prompt, outs[i])
        rel = max_rel_logprob_error(torch.cat([pre[i], dec[i][:-1]]), torch.cat([ref_pre, ref_dec]))
        assert rel < 2e-6, f"prompt {i}: logprob relative error {rel:.2e}"


def test_mha_form_prefill_matches_hf(case):
    # the MHA form (up-projected keys and values, as HF computes them) through the DCP context, in key blocks
    # of 2 rows; unchunked: with HF's fp32 stages a chunked prefill differs from HF's whole-prompt forward by
    # ~1e-7 on plain rope in the absorbed form too (chunked MHA against chunked absorbed: test_mha_form.py,
    # 1e-9)
    path, hf = case
    tol = 2e-6 if "v2" in path.rsplit("/", 1)[-1] else 1e-9
    ours = load_model(path, ParallelState.single(), False, torch.float64, "cpu", hf_numerics=True)
    for prompt in PROMPTS:
        make = dcp_ctx(ours, ParallelState.single(), {}, form="mha", mha_block_bytes=2 * 8 * 56 * 8)
        pre, dec, outs = kimi_greedy(ours, [prompt], STEPS, make, chunk=None)
        ref_pre, ref_dec = _check_ids(hf, prompt, outs[0])
        torch.testing.assert_close(torch.cat([pre[0], dec[0][:-1]]), torch.cat([ref_pre, ref_dec]),
                                   rtol=tol, atol=tol)
