"""`--engine vllm`: vLLM 0.34.0's rules and defaults, each decision with its vLLM source (plan/vllm_plan.py).

The grid (tests/plan/test_vllm_grid.py) checks the verdicts against vLLM's recorded answers; these tests pin
the messages, the reasons and the mapping of vLLM's vocabulary onto dcpctl's topology.
"""
import pytest

from dcpctl.plan.errors import UserError
from dcpctl.plan.planner import make_plan
from dcpctl.plan.recommend import candidates
from dcpctl.plan.resolve import request_from_options
from dcpctl.plan.vllm_args import parse_serve


def plan(**opts):
    return make_plan(request_from_options({"engine": "vllm", "model": "deepseek-v3.1", "hardware": "h200-8", **opts}))


def test_every_decision_names_its_vllm_source():
    p = plan(tp_size=8, dcp_size=8)
    assert p.valid and p.to_dict()["engine"] == {"name": "vllm", "version": "0.34.0"}
    d = {k: (v.value, v.reason) for k, v in p.decisions.items()}
    assert d["dcp_comm_backend"][0] == "ag_rs" and "config/parallel.py set_dcp_defaults" in d["dcp_comm_backend"][1]
    assert d["dcp_replicate_q_proj"][0] is False and "deepseek_v2.py" in d["dcp_replicate_q_proj"][1]
    assert d["decode_attention_backend"][0] == "FLASH_ATTN_MLA" and "_get_backend_priorities" in \
        d["decode_attention_backend"][1]
    assert d["page_size"][0] == 64 and "update_block_size_for_backend" in d["page_size"][1]
    assert d["kv_cache_dtype"] == ("bfloat16", "auto: the model's dtype (bfloat16; config/cache.py cache_dtype)")
    assert d["cp_kv_cache_interleave_size"][0] == 1 and d["gpu_memory_utilization"][0] == 1.0
    assert "resolved_gpu_memory_utilization" in d["gpu_memory_utilization"][1]
    assert all(r for _, r in d.values())


@pytest.mark.parametrize("hw, kv, backend, block", [
    ("h200-8", "auto", "FLASH_ATTN_MLA", 64), ("h200-8", "fp8", "FLASHMLA", 64),
    ("b200-8", "auto", "FLASHINFER_MLA", 64), ("b200-8", "fp8_e4m3", "FLASHINFER_MLA", 64)])
def test_backend_follows_vllms_order(hw, kv, backend, block):
    p = plan(tp_size=8, dcp_size=8, hardware=hw, kv_cache_dtype=kv)
    assert (p.decisions["decode_attention_backend"].value, p.decisions["page_size"].value) == (backend, block)


def test_a_user_block_size_skips_backends_that_cannot_take_it():
    p = plan(tp_size=8, dcp_size=8, hardware="b200-8", page_size=128)
    assert p.decisions["decode_attention_backend"].value == "FLASHINFER_MLA"
    p = plan(tp_size=8, dcp_size=8, attention_backend="CUTLASS_MLA")
    assert [v.code for v in p.violations] == ["vllm_backend_invalid"]
    assert "compute capability not supported" in p.violations[0].message


def test_vllms_rules_with_its_messages():
    p = plan(tp_size=8, dcp_size=16)
    assert p.violations[0].code == "tp_dcp" and "tp_size=8 must be divisible by dcp_size=16" in p.violations[0].message
    p = plan(tp_size=4, prefill_context_parallel_size=2, dcp_size=4)
    assert p.violations[0].code == "vllm_pcp" and "[1, 2, 8]" in p.violations[0].message
    p = plan(tp_size=8, dcp_size=8, kv_cache_dtype="fp8_e5m2")
    assert "vllm_no_backend" in [v.code for v in p.violations]
    p = plan(tp_size=8, dcp_size=8, cp_kv_cache_interleave_size=128)
    assert "vllm_interleave_block" in [v.code for v in p.violations]


def test_vllm_accepts_what_sglang_refuses_at_dcp_1():
    p = plan(tp_size=8, dcp_comm_backend="a2a", dcp_replicate_q_proj=True)
    assert p.valid and len(p.warnings) == 2


def test_dp_with_expert_parallel_is_attention_dp():
    p = plan(tp_size=8, dp_size=2, enable_expert_parallel=True, dcp_size=8, nnodes=2)
    t = p.request.topology
    assert (t.tp_size, t.attn_dp, t.attn_tp, t.ep_size, t.total_gpus) == (16, 2, 8, 16, 16)
    t = plan(tp_size=8, dp_size=2, dcp_size=8, nnodes=2).request.topology
    assert (t.engine_replicas, t.attn_tp, t.ep_size) == (2, 8, 1)


def test_sglang_only_options_and_names_are_refused():
    with pytest.raises(UserError, match="SGLang option"):
        plan(tp_size=8, speculative_algorithm="EAGLE")
    with pytest.raises(UserError, match="vLLM 0.34.0's MLA backends"):
        plan(tp_size=8, attention_backend="fa3")
    with pytest.raises(UserError, match="add --engine vllm"):
        make_plan(request_from_options({"model": "deepseek-v3.1", "tp_size": 8, "attention_backend": "FLASHMLA"}))


def test_pasted_vllm_serve_line():
    opts, rest = parse_serve(["deepseek-ai/DeepSeek-V3.1", "-tp", "8", "-dcp=8", "--enable-expert-parallel",
                              "--no-dcp-q-replicate", "--served-model-name", "x", "--port", "9000"])
    assert opts == {"model_path": "deepseek-ai/DeepSeek-V3.1", "tp_size": 8, "dcp_size": 8,
                    "enable_expert_parallel": True, "dcp_replicate_q_proj": False}
    assert [list(p.tokens) for p in rest] == [["--served-model-name", "x"]]
    with pytest.raises(UserError, match="--tp-size is not an option of dcpctl or of `vllm serve`"):
        parse_serve(["m", "--tp-size", "8"])


def test_recommend_searches_vllms_exchanges():
    req = request_from_options({"engine": "vllm", "model": "deepseek-v3.1", "hardware": "b200-8", "tp_size": 8})
    names = {c.label for c in candidates(req)}
    assert "dcp 8 ag_rs +repQ" in names and not any("fi_a2a" in n for n in names)


def test_typed_vllm_flags_under_engine_vllm():
    """`--engine vllm` takes every `vllm serve` flag as typed: modelled ones planned, the rest passed through;
    a flag vLLM lacks is one sentence naming the nearest, exit 2."""
    import json

    from click.testing import CliRunner

    from dcpctl.cli.main import cli
    args = ["plan", "--engine", "vllm", "--hardware", "h200-8", "--model-preset", "deepseek-v3.1", "-tp", "8",
            "-dcp", "8", "--enforce-eager", "--max-num-batched-tokens", "8192", "--format", "json"]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["valid"] is True
    assert "passed through (not modelled by the plan): --enforce-eager --max-num-batched-tokens 8192" in r.stderr
    bad = CliRunner().invoke(cli, args[:-2] + ["--enforce-eagr"])
    assert bad.exit_code == 2 and "the nearest is --enforce-eager" in bad.output
