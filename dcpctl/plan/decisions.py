"""Every automatic choice, made once here, each with its reason (DESIGN section 3)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dcpctl.plan.errors import Violation
from dcpctl.plan.request import PlanRequest

KIMI_K3_ARCHS = ("KimiK3ForConditionalGeneration", "KimiK3ForCausalLM")


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
    return any(a in KIMI_K3_ARCHS for a in req.model.architectures) or req.model.model_type == "kimi_k3"


def decide(req: PlanRequest) -> Decisions:
    d = Decisions()
    d.items["dcp_comm_backend"] = _backend(req, d)
    d.items["dcp_replicate_q_proj"] = _replicate_q(req, d)
    d.items["decode_attention_backend"] = _attention_backend(req)
    d.items["kv_cache_dtype"] = _kv_dtype(req, d.items["decode_attention_backend"].value)
    d.items["symmetric_memory"] = _symm_mem(req)
    d.items["lse_base"] = Decision("e", "the bundled runtime's local attention returns natural-log LSE; "
                                        "the merge converts any base-2 partial before combining")
    _check_backend_rules(req, d)
    return d


def _backend(req: PlanRequest, d: Decisions) -> Decision:
    c, user = req.topology.dcp_size, req.dcp_comm_backend
    if is_kimi_k3(req) and c > 1:
        forced = "fi_a2a" if req.hardware.mnnvl else "a2a"
        why = "MNNVL fabric detected" if req.hardware.mnnvl else "no MNNVL fabric"
        if user and user != forced:
            d.warnings.append(f"Kimi K3 overrides --dcp-comm-backend {user} with {forced} ({why})")
        return Decision(forced, f"Kimi K3 model override with dcp {c} > 1: {forced} ({why})")
    if user:
        return Decision(user, "set by --dcp-comm-backend")
    if c == 1:
        return Decision("ag_rs", "dcp_size 1: no DCP exchange runs (generic default kept)")
    return Decision("ag_rs", "generic default; --dcp-comm-backend a2a with --dcp-replicate-q-proj is the "
                             "low-latency path")


def _replicate_q(req: PlanRequest, d: Decisions) -> Decision:
    c, user, m = req.topology.dcp_size, req.dcp_replicate_q_proj, req.model
    k3 = is_kimi_k3(req) and c > 1
    want = user if user is not None else (True if k3 else False)
    if not want:
        why = "--no-dcp-replicate-q-proj" if user is False else ("generic default" if not k3 else "")
        return Decision(False, why or "off")
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


def _attention_backend(req: PlanRequest) -> Decision:
    user, hw = req.attention_backend, req.hardware
    if is_kimi_k3(req) and user in ("auto", "cutedsl_mla", "tokenspeed_mla"):
        pick = "cutedsl_mla" if user == "auto" else user
        return Decision(pick, f"Kimi K3 model override: {pick}" + (" (forces fp8 KV)" if pick == "tokenspeed_mla" else ""))
    if user != "auto":
        return Decision(user, "set by --attention-backend")
    if hw.device == "cpu":
        return Decision("torch_native", "CPU: the bundled runtime's torch reference attention")
    if hw.is_sm100:
        return Decision("trtllm_mla", f"SM{hw.sm} (Blackwell) default MLA decode kernel")
    return Decision("flashmla", f"SM{hw.sm} default MLA decode kernel")


def _kv_dtype(req: PlanRequest, backend: str) -> Decision:
    if backend == "tokenspeed_mla":
        return Decision("fp8_e4m3", "tokenspeed_mla forces fp8 KV")
    if req.kv_cache_dtype != "auto":
        return Decision(req.kv_cache_dtype, "set by --kv-cache-dtype")
    dtype = req.model.dtype if req.model.dtype in ("bfloat16", "float16", "float32", "float64") else "bfloat16"
    return Decision(dtype, f"auto: the model's dtype ({req.model.dtype})")


def _symm_mem(req: PlanRequest) -> Decision:
    if is_kimi_k3(req) and req.topology.dcp_size > 1:
        return Decision(False, "Kimi K3 model override with dcp > 1 disables symmetric memory")
    return Decision(None, "left to the engine's default")


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


def _check_fi_a2a(req: PlanRequest, d: Decisions) -> None:
    hw, t = req.hardware, req.topology
    if hw.device != "cuda" or not hw.is_sm100:
        d.violations.append(Violation("fi_a2a_hardware", f"fi_a2a needs CUDA SM100, got {hw.gpu_name} "
                                      f"(device {hw.device}, SM {hw.sm}); use a2a or --hardware b200-8/gb200-nvl72"))
    in_node = t.ranks_per_node % t.dcp_size == 0
    if not hw.mnnvl and not in_node:
        d.violations.append(Violation("fi_a2a_fabric", f"fi_a2a needs an MNNVL fabric or a DCP group inside one node: "
                                      f"ranks_per_node ({t.ranks_per_node}) is not a multiple of dcp ({t.dcp_size}) "
                                      f"and {hw.name} has no MNNVL"))
    if not d.value("dcp_replicate_q_proj"):
        d.violations.append(Violation("fi_a2a_replicate_q", "fi_a2a needs --dcp-replicate-q-proj (one FlashInfer "
                                      "all-to-all replaces the query all-gather)"))
