"""Decode kernel, KV dtype and page size as SGLang 0.5.23 resolves them (dcpctl.plan.kernels)."""
import re
from pathlib import Path

from dcpctl.plan.sglang import EXTRA_CHECKS
from tests.plan.helpers import codes, plan


def dec(p, k):
    return p.decisions[k].value, p.decisions[k].reason


def test_blackwell_only_kernels_are_rejected_on_hopper_at_any_dcp():
    for c in (1, 8):
        p = plan(tp_size=8, dcp_size=c, attention_backend="trtllm_mla")
        assert [v.message for v in p.violations] == [
            "trtllm_mla runs only on Blackwell (SM100), got NVIDIA H200 (SM 90); use fa3/flashmla/triton or "
            "--hardware b200-8"]
        for k in ("cutedsl_mla", "tokenspeed_mla"):
            assert codes(plan(tp_size=8, dcp_size=c, attention_backend=k)) == ["cutedsl_sm100"]


def test_kv_dtypes_sglang_accepts():
    p = plan(tp_size=8, dcp_size=8, kv_cache_dtype="float32")
    assert [v.message for v in p.violations] == [
        "--kv-cache-dtype float32 is not one of SGLang 0.5.23's choices (auto, bf16, bfloat16, fp8_e4m3, "
        "fp8_e5m2); only the bundled CPU runtime stores it"]
    assert plan(model_name="tiny", hardware="cpu", tp_size=2, dcp_size=2, kv_cache_dtype="float64").valid
    # trtllm_mla takes bf16 but not the spelling bfloat16 (overrides.py _mla_kv_cache_dtype_checks)
    p = plan(hardware="b200-8", tp_size=8, dcp_size=8, kv_cache_dtype="bfloat16")
    assert [v.message for v in p.violations] == [
        "trtllm_mla takes --kv-cache-dtype auto, bf16, fp8_e4m3 in SGLang 0.5.23, got bfloat16"]
    p = plan(hardware="b200-8", tp_size=8, dcp_size=8, kv_cache_dtype="bf16")
    assert p.valid and dec(p, "kv_cache_dtype")[0] == "bfloat16"
    assert codes(plan(hardware="b200-8", tp_size=8, attention_backend="cutedsl_mla",
                      kv_cache_dtype="fp8_e5m2")) == ["kernel_kv_dtype"]


def test_default_fa3_falls_back_to_triton_for_fp8_e5m2():
    p = plan(tp_size=8, dcp_size=8, kv_cache_dtype="fp8_e5m2")
    assert dec(p, "decode_attention_backend") == (
        "triton", "SM90 default MLA decode kernel: fa3, but FlashAttention 3 has no fp8_e5m2 KV, so SGLang "
                  "switches to triton")
    # an explicit decode kernel is kept
    assert dec(plan(tp_size=8, attention_backend="fa3", kv_cache_dtype="fp8_e5m2"),
               "decode_attention_backend")[0] == "fa3"


def test_tokenspeed_mla_is_cutedsl_mla_at_page_64():
    p = plan(hardware="b200-8", tp_size=8, dcp_size=8, attention_backend="tokenspeed_mla")
    assert p.valid and dec(p, "decode_attention_backend")[0] == "cutedsl_mla"
    assert dec(p, "page_size")[0] == 64 and dec(p, "kv_cache_dtype")[0] == "fp8_e4m3"


def test_kimi_k3_dcp1_on_sm100_uses_trtllm_mla():
    p = plan(model_name="kimi-k3", hardware="b200-8", tp_size=8, ep_size=8)
    assert dec(p, "decode_attention_backend") == ("trtllm_mla", "Kimi K3 model override on SM100 at dcp 1")
    assert dec(p, "page_size")[0] == 64
    assert dec(plan(model_name="kimi-k3", hardware="h200-8", tp_size=8, ep_size=8),
               "decode_attention_backend")[0] == "fa3"


def test_extra_checks_name_codes_dcpctl_emits():
    """Every code SGLang cannot see is one dcpctl really emits (no stale entries)."""
    src = "".join(p.read_text() for p in (Path(__file__).parents[2] / "dcpctl/plan").glob("*.py"))
    emitted = set(re.findall(r'Violation\(\s*"([a-z0-9_]+)"', src))
    assert set(EXTRA_CHECKS) <= emitted, sorted(set(EXTRA_CHECKS) - emitted)
