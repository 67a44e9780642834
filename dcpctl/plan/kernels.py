"""Decode attention kernel, KV dtype and page size, as SGLang 0.5.23 resolves them (docs/design.md section 3).

Sources (sglang/srt/...): the default kernel is `arg_groups/model_override_base.py`
get_default_attn_backend (fa3 on Hopper, flashinfer on SM100 for MLA) with the DeepSeek family on
SM100 forced to trtllm_mla (`model_overrides/deepseek_v2.py`) and Kimi K3 (`model_overrides/kimi_k3.py`:
cutedsl_mla with dcp > 1, trtllm_mla at dcp 1 on SM100/SM103); `tokenspeed_mla` is a deprecated alias
of cutedsl_mla that forces fp8_e4m3 KV (`arg_groups/serving_hook.py`); fa3 with fp8_e5m2 KV falls back
to triton, and the page-size snaps and kernel/KV-dtype rejections live in `arg_groups/overrides.py`
(_mla_backend_page_constraints, _mla_kv_cache_dtype_checks, _cutedsl_prefill_backend_fill,
_attention_backend_fa3_fp8_fallback).
"""
from __future__ import annotations

from typing import Callable

from dcpctl.plan import attention_table
from dcpctl.plan.errors import Violation
from dcpctl.plan.request import PlanRequest
from dcpctl.plan.sglang import RUNTIME_ONLY_KV_DTYPES, SGLANG_KV_DTYPES, SGLANG_VERSION

KIMI_K3_ARCHS = ("KimiK3ForConditionalGeneration",)
# model_overrides/deepseek_v2.py _deepseek_family_overrides: trtllm_mla on SM100 (DeepseekV2 is not listed)
TRTLLM_DEFAULT_ARCHS = ("DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration",
                        "MistralLarge3ForCausalLM")
KERNEL_PAGES = {"flashmla": (64,), "trtllm_mla": (32, 64), "cutedsl_mla": (32, 64)}
KERNEL_KV = {"trtllm_mla": ("auto", "bf16", "fp8_e4m3"),
             "cutedsl_mla": ("auto", "bf16", "bfloat16", "fp8_e4m3")}

Add = Callable[[Violation], None]


def is_kimi_k3(req: PlanRequest) -> bool:
    return any(a in KIMI_K3_ARCHS for a in req.model.architectures)


def _sm100(req: PlanRequest) -> bool:
    return req.hardware.device == "cuda" and req.hardware.is_sm100


def attention_backend(req: PlanRequest, add: Add) -> tuple[str, str]:
    """(kernel, reason) for decode attention."""
    user, hw, c = req.attention_backend, req.hardware, req.topology.dcp_size
    alias = user == "tokenspeed_mla"
    if is_kimi_k3(req) and c > 1:
        if user in ("auto", "cutedsl_mla", "tokenspeed_mla"):
            why = " (tokenspeed_mla is its deprecated alias)" if alias else ""
            return ("cutedsl_mla",
                    f"Kimi K3 model override with dcp {c} > 1: cutedsl_mla decode, trtllm_mla prefill{why}")
        if user != "aiter":
            add(Violation("k3_decode_backend", f"Kimi K3 with dcp ({c}) > 1 needs decode backend cutedsl_mla "
                          f"(or aiter on ROCm), got {user}"))
        return user, "set by --attention-backend"
    if alias:
        return ("cutedsl_mla",
                "tokenspeed_mla is SGLang's deprecated alias of cutedsl_mla (forces fp8_e4m3 KV)")
    if user != "auto":  # an explicit decode kernel is kept (the fa3 fallback below rewrites only the default)
        return user, "set by --attention-backend"
    if hw.device == "cpu":
        return "torch_native", "CPU: the bundled runtime's torch reference attention"
    if _sm100(req) and is_kimi_k3(req) and hw.sm in (100, 103):
        return "trtllm_mla", f"Kimi K3 model override on SM{hw.sm} at dcp 1"
    if _sm100(req) and any(a in TRTLLM_DEFAULT_ARCHS for a in req.model.architectures):
        return "trtllm_mla", f"SM{hw.sm} default for the DeepSeek family (SGLang's DeepSeek model override)"
    if _sm100(req):
        return "flashinfer", f"SM{hw.sm} default MLA decode kernel"
    return _fa3_fallback(req, "fa3", f"SM{hw.sm} default MLA decode kernel")


def _fa3_fallback(req: PlanRequest, kernel: str, reason: str) -> tuple[str, str]:
    if kernel == "fa3" and req.kv_cache_dtype == "fp8_e5m2":
        return ("triton",
                f"{reason}: fa3, but FlashAttention 3 has no fp8_e5m2 KV, so SGLang switches to triton")
    return kernel, reason


def kv_dtype(req: PlanRequest) -> tuple[str, str]:
    if req.attention_backend == "tokenspeed_mla":
        return "fp8_e4m3", "tokenspeed_mla forces fp8_e4m3 KV"
    if req.kv_cache_dtype == "bf16":
        return "bfloat16", "set by --kv-cache-dtype bf16"
    if req.kv_cache_dtype != "auto":
        return req.kv_cache_dtype, "set by --kv-cache-dtype"
    dtype = req.model.dtype if req.model.dtype in ("bfloat16", "float16", "float32",
                                                   "float64") else "bfloat16"
    return dtype, f"auto: the model's dtype ({req.model.dtype})"


def page_size(req: PlanRequest, kernel: str, warn: Callable[[str], None]) -> tuple[int, str]:
    allowed, user = KERNEL_PAGES.get(kernel), req.page_size
    if allowed is None:
        return user or 1, "set by --page-size" if user else "default 1 token per page"
    if user in allowed:
        return user, f"set by --page-size ({kernel} accepts {list(allowed)})"
    if user is not None:
        warn(f"--page-size {user} replaced by {allowed[-1]}: {kernel} needs one of {list(allowed)}")
    return allowed[-1], f"{kernel} needs a page size in {list(allowed)}"


def check(req: PlanRequest, kernel: str, kv: str, add: Add) -> None:
    """Kernel rules SGLang rejects at resolution, then those it meets only at run time
    (sglang.EXTRA_CHECKS)."""
    hw, c, user_kv = req.hardware, req.topology.dcp_size, req.kv_cache_dtype
    if hw.device == "cuda" and user_kv in RUNTIME_ONLY_KV_DTYPES:
        add(Violation("kv_dtype_choice", f"--kv-cache-dtype {user_kv} is not one of SGLang "
                      f"{SGLANG_VERSION}'s choices ({', '.join(SGLANG_KV_DTYPES)}); only the bundled CPU "
                      "runtime stores it"))
    if kernel == "trtllm_mla" and hw.device == "cuda" and not _sm100(req):
        add(Violation("trtllm_sm100", f"trtllm_mla runs only on Blackwell (SM100), got {hw.gpu_name} (SM "
                      f"{hw.sm}); use fa3/flashmla/triton or --hardware b200-8"))
    if kernel == "cutedsl_mla" and hw.device == "cuda" and not _sm100(req):
        add(Violation("cutedsl_sm100", f"cutedsl_mla runs only on Blackwell (SM100), got {hw.gpu_name} (SM "
                      f"{hw.sm}); use --hardware b200-8/gb200-nvl72"))
    eff_kv = "fp8_e4m3" if req.attention_backend == "tokenspeed_mla" else user_kv
    if kernel in KERNEL_KV and eff_kv not in KERNEL_KV[kernel]:
        add(Violation("kernel_kv_dtype", f"{kernel} takes --kv-cache-dtype {', '.join(KERNEL_KV[kernel])} in "
                      f"SGLang {SGLANG_VERSION}, got {user_kv}"))
    if c > 1 and kernel == "trtllm_mla" and req.speculative_algorithm:
        add(Violation("trtllm_dcp_spec", f"trtllm_mla decode with dcp ({c}) > 1 does not support "
                      f"--speculative-algorithm {req.speculative_algorithm}; select cutedsl_mla"))
    if c > 1 and kernel == "flashmla" and kv.startswith("fp8"):
        add(Violation("flashmla_fp8_dcp", "flashmla with fp8 KV does not support dcp > 1"))


def served_page_size(req: PlanRequest, kernel: str, page: tuple[int, str], kv: str) -> tuple[int, str]:
    """The page size the bundled runtime serves with (launch config kv.page_size): `page` (SGLang's, the
    plan's page_size decision) unless, on CUDA with neither --page-size nor the decode kernel fixing it, the
    runtime's measured decode table has cells for this shape at another page size (there its rule picks
    FlashInfer / FlashMLA / ours per cell; at a page size with no cell only ours runs; FlashMLA reads pages of
    64 only, as SGLang forces)."""
    if req.page_size is not None or kernel in KERNEL_PAGES:
        return page[0], f"the plan's page_size ({page[1]})"
    return _measured_page(req, kv) or (page[0], f"the plan's page_size ({page[1]})")


def _measured_page(req: PlanRequest, kv: str) -> tuple[int, str] | None:
    hw, t = req.hardware, req.topology
    if hw.device != "cuda":
        return None
    heads = req.model.num_heads // t.attn_tp * t.dcp_size
    kv_name = attention_table.KV_NAMES.get(kv, kv)
    cells = attention_table.table_for(hw.gpu_name, hw.sm, req.attention_table)["cells"]   # this GPU's table
    pages = sorted({c["page_size"] for c in cells if c["heads"] == heads and c["kv_dtype"] == kv_name})
    if not pages:
        return None
    page = attention_table.FLASHMLA_PAGE if attention_table.FLASHMLA_PAGE in pages else pages[-1]
    return page, (f"the bundled runtime's measured decode table has cells for {heads} kernel heads, "
                  f"{kv_name} KV on {hw.gpu_name} at page {page} (FlashMLA reads only pages of "
                  f"{attention_table.FLASHMLA_PAGE}); at page 1 only its own kernel would run")
