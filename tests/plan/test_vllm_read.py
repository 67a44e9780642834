"""`vllm serve` lines read as vLLM 0.34.0 reads them (plan/vllm_read.py, vllm_settings.py, vllm_rules.py).

The grid (benchmarks/vllm/vllm_grid.py, groups `spellings` and `passed`) runs the same kinds of line through
vLLM's own parser; these pin dcpctl's side with exact values and messages."""
from __future__ import annotations

import pytest

from dcpctl.plan import vllm_read, vllm_settings
from dcpctl.plan.errors import UserError
from dcpctl.plan.planner import make_plan
from dcpctl.plan.resolve import request_from_options
from dcpctl.plan.vllm_args import parse_serve

BASE = ["deepseek-ai/DeepSeek-V3.1", "-tp", "8", "-dcp", "8"]


def plan(*args: str, hardware: str = "h200-8"):
    opts, rest = parse_serve([*BASE, *args])
    groups = [list(p.tokens) for p in rest]
    return make_plan(request_from_options({**opts, "engine": "vllm", "model": "deepseek-v3.1", "hardware": hardware,
                                           "model_path": None, "engine_args": groups}))


@pytest.mark.parametrize("typed, value", [("32k", 32000), ("128K", 131072), ("1.5k", 1500), ("4096", 4096)])
def test_human_readable_lengths(typed, value):
    assert vllm_read.human_int(typed, "--max-model-len", auto=True) == value
    assert parse_serve([*BASE, "--max-model-len", typed])[0]["context_len"] == value


def test_auto_length_is_the_models_and_a_bad_one_is_refused():
    assert "context_len" not in parse_serve([*BASE, "--max-model-len", "-1"])[0]
    assert "context_len" not in parse_serve([*BASE, "--max_model_len=auto"])[0]
    with pytest.raises(UserError, match="Decimals|takes an integer"):
        parse_serve([*BASE, "--max-model-len", "1.5K"])


def test_spellings_of_flexible_argument_parser():
    opts, rest = parse_serve(["m", "--tensor_parallel_size=8", "--decode_context_parallel_size", "4",
                              "--attention-backend", "flashmla", "-O3", "--attention-config.flash_attn_version", "3"])
    assert opts == {"model_path": "m", "tp_size": 8, "dcp_size": 4, "attention_backend": "FLASHMLA"}
    assert [p.tokens for p in rest] == [("--optimization-level", "3"), ("--attention-config.flash_attn_version", "3")]
    s = vllm_read.settings(tuple(p.tokens for p in rest) + (("-ac", '{"backend": "triton_mla"}'),))
    assert s == {"optimization_level": "3", "attention_config": {"flash_attn_version": 3, "backend": "triton_mla"}}


def test_settings_change_what_the_plan_resolves():
    half = plan("--dtype", "half")
    assert half.decisions["kv_cache_dtype"].value == "float16" and "set by --dtype half" in \
        half.decisions["kv_cache_dtype"].reason
    assert not plan("--dtype", "float32").valid  # no MLA backend runs float32
    assert plan("--attention-config.backend", "triton_mla").decisions["decode_attention_backend"].value == "TRITON_MLA"
    with pytest.raises(UserError, match="mutually exclusive"):
        plan("--attention-config.backend", "triton_mla", "--attention-backend", "FLASHMLA")
    assert not plan("--max-model-len", "300000").valid
    assert plan("--hf-overrides", '{"max_position_embeddings": 327680}', "--max-model-len", "300000").valid


@pytest.mark.parametrize("args, value", [
    ((), 1.0), (("--disable-extensible-kv-cache",), 0.92), (("--kv-cache-memory-bytes", "20G"), 0.92),
    (("--num-gpu-blocks-override", "4096"), 0.92), (("--gpu-memory-utilization", "0.8"), 0.8),
    (("--kv-transfer-config", '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}'), 0.92)])
def test_memory_share_as_vllm_resolves_it(args, value):
    assert plan(*args).decisions["gpu_memory_utilization"].value == value


@pytest.mark.parametrize("args, match", [
    (("--enable-eplb",), "enable_expert_parallel must be True to use EPLB"),
    (("--enable-dbo",), "Microbatching .* only supports the deepep_low_latency"),
    (("--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1, "draft_tensor_parallel_size": 4}'),
     "speculative_draft_tensor_parallel_size=4 cannot be other value than 1"),
    (("-dcp", "4", "--kv-transfer-config", '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}'),
     "decode_context_parallel_size=4 must be 1 or equal to the NIXL transfer parallel size=8")])
def test_combinations_vllm_refuses(args, match):
    with pytest.raises(UserError, match=match):
        plan(*args)
    assert plan("--enable-eplb", "-ep").valid and plan("--enable-dbo", "--all2all-backend", "deepep_low_latency").valid


def test_interleave_zero_and_negative_under_dcp():
    assert [v.code for v in plan("--cp-kv-cache-interleave-size", "0").violations] == ["vllm_interleave_zero"]
    assert [v.code for v in plan("--cp-kv-cache-interleave-size", "-1").violations] == ["vllm_interleave_negative"]
    at_dcp1 = make_plan(request_from_options({"engine": "vllm", "model": "deepseek-v3.1", "hardware": "h200-8",
                                              "tp_size": 8, "cp_kv_cache_interleave_size": 0}))
    assert at_dcp1.valid and any("no effect at dcp 1" in w for w in at_dcp1.warnings)


def test_pcp_with_dcp_on_a_dense_mla_model_is_refused_as_vllms_model_runner_does():
    p = plan("-tp", "4", "-pcp", "2", "-dcp", "2")
    assert "vllm_pcp_dcp_dense" in [v.code for v in p.violations]


def test_known_defect_is_a_warning_with_its_thread():
    mtp = ("--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}')
    p = plan("--attention-backend", "FLASHMLA", *mtp)
    assert p.valid and [d.thread for d in p.defects] == ["https://github.com/vllm-project/vllm/issues/45425"]
    assert "cudagraph_mode" in p.to_dict()["defects"][0]["workaround"]
    assert not plan("--attention-backend", "FLASHMLA", *mtp, "--enforce-eager").defects
    assert not plan(*mtp).defects  # FLASH_ATTN_MLA at interleave 1 has DCP varlen decode
    assert not vllm_settings.speculates({})


def test_a_config_file_and_a_later_flag_as_vllm_reads_them(tmp_path):
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("tensor-parallel-size: 8\ndecode_context_parallel_size: 4\nenforce-eager: true\n"
                   "speculative-config:\n  method: mtp\n  num_speculative_tokens: 1\n")
    opts, rest = parse_serve(["m", "--config", str(cfg), "-dcp", "8"])  # the line's -dcp wins over the file's
    assert opts == {"model_path": "m", "tp_size": 8, "dcp_size": 8}
    assert [p.tokens for p in rest] == [("--enforce-eager",),
                                        ("--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}')]
    with pytest.raises(UserError, match="reads a .yaml or .yml config file"):
        parse_serve(["m", "--config", str(tmp_path / "serve.json")])
