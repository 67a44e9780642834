"""Plan -> launch config (docs/launch-config.md): a pure function; the runtime reads only this."""
from __future__ import annotations

from pathlib import Path
from typing import get_args

from dcpctl.contract.fields import parse_value
from dcpctl.contract.launch_config import (CommBackend, Decisions, Dtype, GroupsSection, HiCacheSection,
                                           KVSection, LaunchConfig, ModelSection, RuntimeSection,
                                           SpecAlgorithm, SpeculativeSection, TopologySection)
from dcpctl.plan.engines import target
from dcpctl.plan.errors import UserError
from dcpctl.plan.planner import Plan

RUNTIME_DTYPES = get_args(Dtype)
RUNTIME_BACKENDS = get_args(CommBackend)
HICACHE_RATIO = 2
RUNTIME_SPEC_ALGORITHMS = get_args(SpecAlgorithm)


def render_launch_config(plan: Plan, model_path: str | Path, dtype: str, device: str, max_total_tokens: int,
                         chunked_prefill_size: int) -> LaunchConfig:
    """The bundled runtime's launch config for a valid plan.

    `max_total_tokens` caps the virtual KV tokens (the plan's capacity can be far larger than a CPU
    run needs); physical rows per rank = min(plan rows, ceil(max_total_tokens / dcp)).
    kv.max_running_requests is the plan's --max-running-requests (None: no cap; a server fills it
    with `LaunchConfig.for_serving`).
    """
    _check_runtime_supports(plan, dtype)
    t, d, req = plan.request.topology, plan.decisions, plan.request
    page = served_page(plan, device)
    rows = _rows_per_rank(plan, max_total_tokens, page)
    kv = KVSection(page, rows, chunked_prefill_size, req.max_running_requests)
    # HiCache L2 host tier: HICACHE_RATIO x the device pages (SGLang's --hicache-ratio default)
    hicache = HiCacheSection(HICACHE_RATIO * (rows // page)) if req.enable_hierarchical_cache else None
    return LaunchConfig(
        model=ModelSection(str(Path(model_path).resolve()), dtype),  # type: ignore[arg-type]
        device=device, dist_backend="nccl" if device == "cuda" else "gloo",  # type: ignore[arg-type]
        world_size=t.world,
        topology=TopologySection(t.tp_size, t.attn_tp, t.attn_dp, t.dcp_size, t.ep_size, t.pp_size),
        groups=parse_value(GroupsSection, plan.groups, "groups"),
        decisions=Decisions(d["dcp_comm_backend"].value, bool(d["dcp_replicate_q_proj"].value),
                            d["lse_base"].value, attention_backend=plan.request.attention_backend),
        kv=kv, speculative=speculative_section(plan), hicache=hicache, runtime=runtime_section(plan))


def runtime_section(plan: Plan) -> RuntimeSection:
    """launch config `runtime`: the plan's numerics and speed decisions (plan/runtime_choices.py)."""
    d = plan.decisions
    return RuntimeSection(d["fp8_gemm"].value, d["blas"].value, d["cublaslt_workspace_kib"].value,
                          d["dist_timeout"].value, d["attention_table"].value, d["mla_configs"].value,
                          d["gemm16_table"].value)


def _check_runtime_supports(plan: Plan, dtype: str) -> None:
    """UserError unless the plan is valid and the bundled runtime can run it."""
    engine = target(plan.request.engine)
    if not engine.bundled_runtime:
        raise UserError(f"the bundled runtime runs plans under SGLang's rules; a --engine {engine.name} plan "
                        f"is for `dcpctl export {engine.name}` ({engine.label} serves it)")
    if not plan.valid:
        raise UserError("the plan is invalid: " + "; ".join(v.message for v in plan.violations))
    t, backend = plan.request.topology, plan.decisions["dcp_comm_backend"].value
    if backend not in RUNTIME_BACKENDS:
        raise UserError(f"the bundled runtime has no {backend} exchange; pass --dcp-comm-backend a2a or "
                        "ag_rs")
    if dtype not in RUNTIME_DTYPES:
        raise UserError(f"--dtype {dtype} is not supported; valid: {', '.join(RUNTIME_DTYPES)}")
    if t.engine_replicas > 1:
        raise UserError("the bundled runtime runs one engine: use --enable-dp-attention with --dp-size")
    if t.pp_size > 1:
        raise UserError(f"the bundled runtime has no pipeline parallelism (--pp-size {t.pp_size}); plan it "
                        "for SGLang with `dcpctl export sglang`")
    req = plan.request   # HiCache with speculative decoding: LaunchConfig refuses the pair
    if req.disaggregation_mode != "null" and req.model.kda is not None:  # SGLang moves the state (PR #10912)
        raise UserError("the bundled runtime's PD transfer moves MLA KV only, not the KDA state of a hybrid "
                        "model's linear-attention layers: run it without --disaggregation-mode, or deploy "
                        "with `dcpctl export sglang`")


def served_page(plan: Plan, device: str) -> int:
    """The KV page size the bundled runtime serves with: the plan's served_page_size decision on CUDA (the
    page its measured decode kernels run at), the plan's page_size elsewhere."""
    d = plan.decisions
    return (int(d["served_page_size"].value)
            if device == "cuda" and "served_page_size" in d else plan.request.page_size)


def _rows_per_rank(plan: Plan, max_total_tokens: int, page: int) -> int:
    # min(plan rows, ceil(max_total_tokens / dcp)), rounded down to whole pages (at least one page)
    rows = -(-max_total_tokens // plan.request.topology.dcp_size)
    if plan.memory.get("kv_rows_per_rank"):
        rows = min(rows, plan.memory["kv_rows_per_rank"])
    return max(rows // page, 1) * page


def speculative_section(plan: Plan) -> SpeculativeSection | None:
    """launch config `speculative` from the plan request (None without --speculative-algorithm)."""
    req = plan.request
    algo = req.speculative_algorithm
    if not algo:
        return None
    if algo not in RUNTIME_SPEC_ALGORITHMS:
        raise UserError(f"--speculative-algorithm {algo}: the bundled runtime supports "
                        f"{', '.join(RUNTIME_SPEC_ALGORITHMS)} only")
    path = (req.draft_model.extra or {}).get("path") if req.draft_model is not None else None
    if not path:
        raise UserError("--speculative-algorithm STANDALONE needs --speculative-draft-model-path DIR "
                        "(a checkpoint directory; a preset has no weights)")
    return SpeculativeSection(algo, str(Path(path).resolve()), int(req.speculative_num_draft_tokens))
