"""Every automatic choice, made once here, each with its reason (docs/design.md section 3).

Defaults follow SGLang 0.5.23's resolution (dcpctl.plan.sglang): comm backend from
`arg_groups/overrides.py` _dcp_comm_backend_default (dcp 1 -> ag_rs; fi_a2a where
`utils/common.py` is_fi_a2a_supported; a2a on CUDA; ag_rs elsewhere), for every model: Kimi K3's
override (`model_overrides/kimi_k3.py`) keeps a user backend and only fills in replicated Q.
The decode kernel, KV dtype and page size are resolved in dcpctl.plan.kernels.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dcpctl.plan import attention_table, kernels, runtime_choices, speculative
from dcpctl.plan.errors import Violation
from dcpctl.plan.kernels import is_kimi_k3
from dcpctl.plan.request import PlanRequest


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


def tp_per_node(req: PlanRequest) -> int:
    """SGLang's count (utils/common.py is_fi_a2a_supported): tp // max(nnodes // pp, 1)."""
    t = req.topology
    return t.tp_size // max(t.nnodes // t.pp_size, 1)


def fi_a2a_supported(req: PlanRequest) -> bool:
    """SM100 and (MNNVL fabric, or tp_per_node % dcp == 0: the DCP group inside one node)."""
    hw = req.hardware
    return hw.device == "cuda" and hw.is_sm100 and (hw.mnnvl or tp_per_node(req) % req.topology.dcp_size == 0)


def decide(req: PlanRequest) -> Decisions:
    d = Decisions()
    d.items["dcp_comm_backend"] = _backend(req, d)
    d.items["dcp_replicate_q_proj"] = _replicate_q(req, d)
    kernel, why = kernels.attention_backend(req, d.violations.append)
    d.items["decode_attention_backend"] = Decision(kernel, why)
    d.items["kv_cache_dtype"] = Decision(*kernels.kv_dtype(req))
    d.items["page_size"] = Decision(*kernels.page_size(req, kernel, d.warnings.append))
    d.items["served_page_size"] = Decision(*kernels.served_page_size(
        req, kernel, (d.value("page_size"), d.items["page_size"].reason), d.value("kv_cache_dtype")))
    d.items["local_attention_backend"] = Decision(*attention_table.plan_decision(
        req, d.value("kv_cache_dtype"), d.value("served_page_size")))
    spec = speculative.num_draft_tokens(req, kernel, d.value("page_size"), d.violations.append,
                                        d.warnings.append)
    if spec is not None:
        d.items["speculative_num_draft_tokens"] = Decision(*spec)
    d.items["symmetric_memory"] = _symm_mem(req)
    d.items["lse_base"] = Decision("e", "the bundled runtime's own kernels return natural-log LSE "
                                        "(FlashInfer's base 2 is tagged so); the merge converts any base-2 "
                                        "partial before combining")
    for name, (value, why) in runtime_choices.decide(req).items():
        d.items[name] = Decision(value, why)
    _check_backend_rules(req, d)
    kernels.check(req, kernel, d.value("kv_cache_dtype"), d.violations.append)
    return d


def _backend(req: PlanRequest, d: Decisions) -> Decision:
    c, user, hw = req.topology.dcp_size, req.dcp_comm_backend, req.hardware
    if user:
        return Decision(user, "set by --dcp-comm-backend")
    if c == 1:
        return Decision("ag_rs", "dcp_size 1: no DCP exchange runs")
    if fi_a2a_supported(req):
        where = "MNNVL fabric" if hw.mnnvl else f"DCP group inside one node (tp per node {tp_per_node(req)})"
        return Decision("fi_a2a", f"SM{hw.sm} with {where}: FlashInfer's all-to-all")
    if hw.device == "cuda":
        return Decision("a2a", "CUDA default: one packed all-to-all (fi_a2a needs SM100 with MNNVL or an "
                               "in-node DCP group)")
    return Decision("ag_rs", f"generic default on {hw.device}: all-gather + reduce-scatter")


def _replicate_q(req: PlanRequest, d: Decisions) -> Decision:
    c, user, m = req.topology.dcp_size, req.dcp_replicate_q_proj, req.model
    if user is False:
        return Decision(False, "--no-dcp-replicate-q-proj")
    backend = d.value("dcp_comm_backend")
    if user is None and not (is_kimi_k3(req) and c > 1 and backend in ("a2a", "fi_a2a")):
        return Decision(False, "off by default (no model override applies)")
    how = "set by --dcp-replicate-q-proj" if user else \
        f"Kimi K3 model override with dcp {c} > 1 and {backend} (disable with --no-dcp-replicate-q-proj)"
    if m.quantization:
        how += f"; {m.quantization} weights: the block-FP8 q_b_proj is gathered and w_kc dequantized"
    return Decision(True, how)


def _symm_mem(req: PlanRequest) -> Decision:
    if is_kimi_k3(req) and req.topology.dcp_size > 1:
        return Decision(False, "Kimi K3 model override with dcp > 1 disables symmetric memory")
    return Decision(False, "SGLang default (--enable-symm-mem off)")


def _check_backend_rules(req: PlanRequest, d: Decisions) -> None:
    c, backend, rep = req.topology.dcp_size, d.value("dcp_comm_backend"), d.value("dcp_replicate_q_proj")
    if backend in ("a2a", "fi_a2a") and c == 1:
        d.violations.append(Violation("backend_dcp1", f"--dcp-comm-backend {backend} needs dcp > 1, got dcp "
                                      "(1); use ag_rs or raise --dcp-size"))
    if rep and c == 1:
        d.violations.append(Violation("replicate_q_dcp1",
                                      "--dcp-replicate-q-proj needs dcp > 1, got dcp (1)"))
    elif rep and backend == "ag_rs":
        d.violations.append(Violation("replicate_q_ag_rs", "--dcp-replicate-q-proj does not work with "
                                      "--dcp-comm-backend ag_rs; valid backends: a2a, fi_a2a"))
    if backend == "fi_a2a":
        _check_fi_a2a(req, d)
    if c > 1 and req.enable_prefill_cp:
        d.violations.append(Violation("dcp_prefill_cp",
                                      f"dcp ({c}) > 1 does not support --enable-prefill-cp"))
    elif req.enable_prefill_cp:
        d.violations.append(Violation("prefill_cp_strategy", "--enable-prefill-cp needs SGLang's "
                                      "--cp-strategy, which dcpctl does not plan"))


def _check_fi_a2a(req: PlanRequest, d: Decisions) -> None:
    hw, t = req.hardware, req.topology
    if hw.device != "cuda" or not hw.is_sm100:
        d.violations.append(Violation("fi_a2a_hardware", f"fi_a2a needs CUDA SM100, got {hw.gpu_name} "
                                      f"(device {hw.device}, SM {hw.sm}); use a2a or --hardware "
                                      "b200-8/gb200-nvl72"))
    if not hw.mnnvl and tp_per_node(req) % t.dcp_size:
        d.violations.append(Violation("fi_a2a_fabric", "fi_a2a needs an MNNVL fabric or a DCP group inside "
                                      f"one node: tp per node ({tp_per_node(req)}) = tp ({t.tp_size}) // "
                                      f"(nnodes ({t.nnodes}) // pp ({t.pp_size})) is not a multiple of dcp "
                                      f"({t.dcp_size}) and {hw.name} has no MNNVL"))
