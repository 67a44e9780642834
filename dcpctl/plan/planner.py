"""make_plan: PlanRequest -> Plan (valid or not, never raises for a bad topology)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from dcpctl.plan import compose, decisions, defects, groups, memory, speculative
from dcpctl.plan.engines import target
from dcpctl.plan.errors import Violation
from dcpctl.plan.request import PlanRequest
from dcpctl.plan.sglang import SGLANG_VERSION


@dataclass
class Plan:
    request: PlanRequest
    violations: list[Violation] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    groups: dict[str, list[list[int]]] = field(default_factory=dict)
    decisions: dict[str, decisions.Decision] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    compositions: dict[str, Any] = field(default_factory=dict)
    estimate: dict[str, Any] = field(default_factory=dict)  # cost model, when asked for
    skipped_checks: list[str] = field(default_factory=list)  # topology-only: the model checks not made
    defects: list[defects.Defect] = field(default_factory=list)  # the engine's known defects this plan meets

    @property
    def topology_only(self) -> bool:
        return bool(self.skipped_checks)

    @property
    def all_warnings(self) -> list[str]:
        """The plan's warnings, then one per known engine defect it meets (with its thread and workaround)."""
        return [*self.warnings, *(x.warning() for x in self.defects)]

    @property
    def valid(self) -> bool:
        return not self.violations

    def to_dict(self, rank_map: bool = True) -> dict[str, Any]:
        """The JSON/YAML contract (docs/design.md section 8)."""
        r, t = self.request, self.request.topology
        d: dict[str, Any] = {
            "valid": self.valid,
            "sglang_version": SGLANG_VERSION,
            "engine": {"name": r.engine, "version": target(r.engine).version},
            "violations": [v.to_dict() for v in self.violations],
            "warnings": self.all_warnings,
            "topology": {**t.__dict__, "world_size": t.world, "total_gpus": t.total_gpus, "attn_tp_size": t.attn_tp,
                         "attn_dp_size": t.attn_dp, "ranks_per_node": t.ranks_per_node,
                         "kernel_heads": r.model.num_heads // t.attn_tp * t.dcp_size
                         if r.model.num_heads % t.attn_tp == 0 and not self.topology_only else None},
            "model": None if self.topology_only else r.model.summary(),
            "hardware": r.hardware.to_dict(),
            "groups": self.groups,
            "decisions": {k: v.to_dict() for k, v in self.decisions.items()},
            "memory": self.memory,
            "compositions": self.compositions,
            "options": {"page_size": r.page_size, "mem_fraction_static": r.mem_fraction_static,
                        "context_len": r.context_len},
            # `sglang serve` flags the plan does not model: carried by `export sglang` exactly as typed
            "passed_through": [list(g) for g in r.engine_args],
        }
        if self.defects:
            d["defects"] = [x.to_dict() for x in self.defects]
        if self.topology_only:
            d["topology_only"] = True
            d["skipped_checks"] = list(self.skipped_checks)
        if rank_map and self.groups:
            d["rank_map"] = [groups.rank_info(t, i).to_dict() for i in range(t.total_gpus)]
        return d


def make_plan(req: PlanRequest, topology_only: bool = False) -> Plan:
    """The verdict, groups, decisions and memory of a request.

    topology_only: no model was given (req.model is resolve.NO_MODEL, a stand-in); the verdict rests on the
    topology and the hardware alone and `skipped_checks` names every model check left out."""
    if req.topology.gpus_per_node is None and req.hardware.device == "cuda":
        # a GPU profile fixes the node size; on CPU, ranks of a node share the host
        req = replace(req, topology=replace(req.topology, gpus_per_node=req.hardware.gpus_per_node))
    t = req.topology
    engine = target(req.engine)  # the engine's rules and defaults, each with its source (plan/engines.py)
    req = engine.prepare(req)
    plan = Plan(req, skipped_checks=list(SKIPPED_WITHOUT_MODEL) if topology_only else [])
    plan.violations += engine.violations(req, with_model=not topology_only)
    dec = engine.decide(req)
    spec_k = dec.items.get("speculative_num_draft_tokens")  # decided once, used everywhere
    req = plan.request = replace(req, page_size=dec.value("page_size"), speculative_num_draft_tokens=spec_k.value
                                 if spec_k else req.speculative_num_draft_tokens, **speculative.auto_steps_topk(req))
    plan.decisions, plan.warnings = dec.items, list(dec.warnings)
    plan.defects = defects.met(engine.name, req, dec.items)  # known engine defects this plan meets (plan/defects.py)
    plan.violations += dec.violations
    kv_dtype = dec.value("kv_cache_dtype")
    plan.compositions, cviol, cwarn = compose.check_compositions(req, kv_dtype)
    plan.violations += cviol
    plan.warnings += cwarn
    if any(v.code in ("tp_dp", "tp_ep") for v in plan.violations):
        return plan  # no consistent rank layout to show (attention-DP or EP groups undefined)
    plan.groups = groups.build_groups(t)
    if not any(v.code == "tp_dcp" for v in plan.violations):  # dcp > tp: no real DCP group to place on nodes
        _node_warnings(plan)
    if topology_only:
        return plan
    plan.memory, mviol = memory.memory_report(req, kv_dtype, dec.value("dcp_replicate_q_proj"), engine.memory_option)
    plan.violations += mviol
    return plan


SKIPPED_WITHOUT_MODEL = (
    "heads: num_attention_heads % attn_tp == 0 and the kernel heads per DCP rank",
    "pp_layers: pp_size <= num_hidden_layers",
    "memory: weights + KV per rank, longest context and concurrency (docs/design.md section 6 model facts)",
    "model overrides keyed on architectures (Kimi K3: backend, replicated Q, decode kernel, page size)",
    "replicated Q needs unquantized bf16/fp16 weights (decided here as if they were)",
    "kv_cache_dtype auto takes the model's dtype (decided here as bfloat16)",
    "SM100 decode kernel by architecture (trtllm_mla for the DeepSeek family; decided here as another MLA model)",
    "hybrid (KDA) layers",
)


def _node_warnings(plan: Plan) -> None:
    t, hw = plan.request.topology, plan.request.hardware
    crossing = groups.dcp_groups_crossing_nodes(t, plan.groups)
    if crossing and not hw.mnnvl:
        plan.warnings.append(f"{len(crossing)} DCP group(s) cross nodes (ranks_per_node ({t.ranks_per_node}) is not "
                             f"a multiple of dcp ({t.dcp_size})) on {hw.name} without MNNVL: the DCP exchange "
                             f"leaves NVLink; first: ranks {groups.collapse(crossing[0])}")
