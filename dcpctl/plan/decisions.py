"""Every automatic choice, made once here, each with its reason (DESIGN section 3).

Defaults follow SGLang 0.5.23's resolution where DESIGN.md is silent (comm backend: fi_a2a where
supported, a2a on CUDA, ag_rs elsewhere; decode kernel: fa3 on SM90, trtllm_mla for the DeepSeek
family on SM100; page size forced by the kernel). Kimi K3 forces its backend over a user value
with a warning, as DESIGN.md and the planner issue specify.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dcpctl.plan.errors import Violation
from dcpctl.plan.request import PlanRequest

KIMI_K3_ARCHS = ("KimiK3ForConditionalGeneration",)
DEEPSEEK_ARCHS = ("DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM")
KERNEL_PAGES = {"flashmla": (64,), "trtllm_mla": (32, 64), "cutedsl_mla": (32, 64)}


@dataclass(frozen=True)
class Decision:
    value: Any
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "reason": self.reason}


@dataclass
class Decisions:
    items: dict[str, Decision] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def value(self, name: str) -> Any:
        return self.items[name].value


def is_kimi_k3(req: PlanRequest) -> bool:
    return any(a in KIMI_K3_ARCHS for a in req.model.architectures)


def fi_a2a_supported(req: PlanRequest) -> bool:
    """SM100 and (MNNVL fabric, or the DCP group inside one node)."""
    t, hw = req.topology, req.hardware
    return hw.device == "cuda" and hw.is_sm100 and (hw.mnnvl or t.ranks_per_node % t.dcp_size == 0)


def decide(req: PlanRequest) -> Decisions:
    d = Decisions()
    d.items["dcp_comm_backend"] = _backend(req, d)
    d.items["dcp_replicate_q_proj"] = _replicate_q(req, d)
    d.items["decode_attention_backend"] = _attention_backend(req, d)
    kernel = d.value("decode_attention_backend")
    d.items["kv_cache_dtype"] = _kv_dtype(req, kernel)
    d.items["page_size"] = _page_size(req, kernel, d)
    d.items["symmetric_memory"] = _symm_mem(req)
    d.items["lse_base"] = Decision("e", "the bundled runtime's local attention returns natural-log LSE; "
                                        "the merge converts any base-2 partial before combining")
    _check_backend_rules(req, d)
    _check_kernel_rules(req, d)
    return d


def _backend(req: PlanRequest, d: Decisions) -> Decision:
    c, user, hw = req.topology.dcp_size, req.dcp_comm_backend, req.hardware
    if is_kimi_k3(req) and c > 1:
        forced = "fi_a2a" if hw.mnnvl else "a2a"
        why = "MNNVL fabric" if hw.mnnvl else "no MNNVL fabric"
        if user and user != forced:
            d.warnings.append(f"Kimi K3 overrides --dcp-comm-backend {user} with {forced} ({why})")
        return Decision(forced, f"Kimi K3 model override with dcp {c} > 1: {forced} ({why})")
    if user:
        return Decision(user, "set by --dcp-comm-backend")
    if c == 1:
        return Decision("ag_rs", "dcp_size 1: no DCP exchange runs")
    if fi_a2a_supported(req):
        where = "MNNVL fabric" if hw.mnnvl else f"DCP group inside one {req.topology.ranks_per_node}-GPU node"
        return Decision("fi_a2a", f"SM{hw.sm} with {where}: FlashInfer's all-to-all")
    if hw.device == "cuda":
        return Decision("a2a", "CUDA default: one packed all-to-all (fi_a2a needs SM100 with MNNVL or an "
                               "in-node DCP group)")
    return Decision("ag_rs", f"generic default on {hw.device}: all-gather + reduce-scatter")


def _replicate_q(req: PlanRequest, d: Decisions) -> Decision:
    c, user, m = req.topology.dcp_size, req.dcp_replicate_q_proj, req.model
    k3 = is_kimi_k3(req) and c > 1 and d.value("dcp_comm_backend") in ("a2a", "fi_a2a")
    want = user if user is not None else k3
    if not want:
        why = "--no-dcp-replicate-q-proj" if user is False else "off by default (no model override applies)"
        return Decision(False, why)
    if c > 1 and not m.weights_replicable:
        q = f"quantized ({m.quantization})" if m.quantization else f"{m.dtype}"
        if user:
            d.warnings.append(f"--dcp-replicate-q-proj ignored: {q} weights cannot be replicated; "
                              "falling back to the query all-gather")
        return Decision(False, f"weights are {q}: only unquantized bf16/fp16 layers can be replicated, "
                               "so the query is all-gathered")
    if user:
        return Decision(True, "set by --dcp-replicate-q-proj")
    return Decision(True, f"Kimi K3 model override with dcp {c} > 1 (disable with --no-dcp-replicate-q-proj)")


def _attention_backend(req: PlanRequest, d: Decisions) -> Decision:
    user, hw, c = req.attention_backend, req.hardware, req.topology.dcp_size
    if is_kimi_k3(req) and c > 1:
        if user not in ("auto", "cutedsl_mla", "tokenspeed_mla", "aiter"):
            d.violations.append(Violation("k3_decode_backend", f"Kimi K3 with dcp ({c}) > 1 needs decode backend "
                                          f"cutedsl_mla (or aiter on ROCm), got {user}"))
        pick = "cutedsl_mla" if user in ("auto", "tokenspeed_mla") else user
        alias = " (tokenspeed_mla is its deprecated alias; forces fp8 KV)" if user == "tokenspeed_mla" else ""
        return Decision(pick, f"Kimi K3 model override with dcp > 1: {pick}{alias}")
    if user != "auto":
        return Decision(user, "set by --attention-backend")
    if hw.device == "cpu":
        return Decision("torch_native", "CPU: the bundled runtime's torch reference attention")
    if hw.is_sm100:
        deepseek = any(a in DEEPSEEK_ARCHS for a in req.model.architectures)
        pick = "trtllm_mla" if deepseek else "flashinfer"
        return Decision(pick, f"SM{hw.sm} default for {'the DeepSeek family' if deepseek else 'MLA models'}")
    return Decision("fa3", f"SM{hw.sm} default MLA decode kernel")


def _kv_dtype(req: PlanRequest, backend: str) -> Decision:
    if req.attention_backend == "tokenspeed_mla":
        return Decision("fp8_e4m3", "tokenspeed_mla forces fp8 KV")
    if req.kv_cache_dtype != "auto":
        return Decision(req.kv_cache_dtype, "set by --kv-cache-dtype")
    dtype = req.model.dtype if req.model.dtype in ("bfloat16", "float16", "float32", "float64") else "bfloat16"
    return Decision(dtype, f"auto: the model's dtype ({req.model.dtype})")


def _page_size(req: PlanRequest, kernel: str, d: Decisions) -> Decision:
    allowed, user = KERNEL_PAGES.get(kernel), req.page_size
    if allowed is None:
        return Decision(user or 1, "set by --page-size" if user else "default 1 token per page")
    if user in allowed:
        return Decision(user, f"set by --page-size ({kernel} accepts {list(allowed)})")
    if user is not None:
        d.warnings.append(f"--page-size {user} replaced by {allowed[-1]}: {kernel} needs one of {list(allowed)}")
    return Decision(allowed[-1], f"{kernel} needs a page size in {list(allowed)}")


def _symm_mem(req: PlanRequest) -> Decision:
    if is_kimi_k3(req) and req.topology.dcp_size > 1:
        return Decision(False, "Kimi K3 model override with dcp > 1 disables symmetric memory")
    return Decision(False, "SGLang default (--enable-symm-mem off)")


def _check_backend_rules(req: PlanRequest, d: Decisions) -> None:
    c, backend, rep = req.topology.dcp_size, d.value("dcp_comm_backend"), d.value("dcp_replicate_q_proj")
    if backend in ("a2a", "fi_a2a") and c == 1:
        d.violations.append(Violation("backend_dcp1", f"--dcp-comm-backend {backend} needs dcp > 1, got dcp (1); "
                                      "use ag_rs or raise --dcp-size"))
    if rep and c == 1:
        d.violations.append(Violation("replicate_q_dcp1", "--dcp-replicate-q-proj needs dcp > 1, got dcp (1)"))
    elif rep and backend == "ag_rs":
        d.violations.append(Violation("replicate_q_ag_rs", "--dcp-replicate-q-proj does not work with "
                                      "--dcp-comm-backend ag_rs; valid backends: a2a, fi_a2a"))
    if backend == "fi_a2a":
        _check_fi_a2a(req, d)
    if c > 1 and req.enable_prefill_cp:
        d.violations.append(Violation("dcp_prefill_cp", f"dcp ({c}) > 1 does not support --enable-prefill-cp"))


def _check_fi_a2a(req: PlanRequest, d: Decisions) -> None:
    hw, t = req.hardware, req.topology
    if hw.device != "cuda" or not hw.is_sm100:
        d.violations.append(Violation("fi_a2a_hardware", f"fi_a2a needs CUDA SM100, got {hw.gpu_name} "
                                      f"(device {hw.device}, SM {hw.sm}); use a2a or --hardware b200-8/gb200-nvl72"))
    if not hw.mnnvl and t.ranks_per_node % t.dcp_size:
        d.violations.append(Violation("fi_a2a_fabric", f"fi_a2a needs an MNNVL fabric or a DCP group inside one node: "
                                      f"ranks_per_node ({t.ranks_per_node}) is not a multiple of dcp ({t.dcp_size}) "
                                      f"and {hw.name} has no MNNVL"))


def _check_kernel_rules(req: PlanRequest, d: Decisions) -> None:
    """Failures SGLang only meets when the engine starts, reported before any GPU is touched."""
    c, kernel, hw = req.topology.dcp_size, d.value("decode_attention_backend"), req.hardware
    if c == 1:
        return
    if kernel == "cutedsl_mla" and hw.device == "cuda" and not hw.is_sm100:
        d.violations.append(Violation("cutedsl_sm100", f"cutedsl_mla runs only on Blackwell (SM100), got "
                                      f"{hw.gpu_name} (SM {hw.sm}); use --hardware b200-8/gb200-nvl72"))
    if kernel == "trtllm_mla" and req.speculative_algorithm:
        d.violations.append(Violation("trtllm_dcp_spec", f"trtllm_mla decode with dcp ({c}) > 1 does not support "
                                      f"--speculative-algorithm {req.speculative_algorithm}; select cutedsl_mla"))
    if kernel == "flashmla" and str(d.value("kv_cache_dtype")).startswith("fp8"):
        d.violations.append(Violation("flashmla_fp8_dcp", "flashmla with fp8 KV does not support dcp > 1"))
