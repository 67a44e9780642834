"""Combinations of `vllm serve` flags vLLM 0.34.0 refuses when it builds its config, checked on the typed flags.

Each rule is vLLM's, with its message and source (paths under vllm/ in the release wheel); the vLLM grid
(benchmarks/vllm/vllm_grid.py, group `passed`) runs every one through vLLM's own code. They are one-sentence
errors (exit 2), as a mistyped flag is: vLLM refuses before any plan could run.
"""
from __future__ import annotations

from typing import Any

from dcpctl.plan.errors import UserError
from dcpctl.plan.vllm import VLLM_VERSION

# config/vllm.py VllmConfig.__post_init__: microbatching (DBO) on CUDA
UBATCH_A2A = ("deepep_low_latency", "deepep_high_throughput", "nixl_ep")
DEFAULT_A2A = "allgather_reducescatter"  # config/parallel.py ParallelConfig.all2all_backend


def refuse(opts: dict[str, Any], settings: dict[str, Any]) -> None:
    """UserError for the first combination vLLM refuses. `opts`: vLLM's parallel options (tp_size is its TP, before
    dcpctl's attention-DP mapping); `settings`: the passed-through flags as vLLM reads them."""
    tp, dp, pcp = opts.get("tp_size") or 1, opts.get("dp_size") or 1, opts.get("prefill_context_parallel_size") or 1
    dcp = opts.get("dcp_size") or 1
    for why in (_eplb(settings, bool(opts.get("enable_expert_parallel")), tp, dp, pcp), _ubatching(settings),
                _draft(settings, tp, dcp), _nixl(settings, tp, pcp, dcp)):
        if why:
            raise UserError(f"vLLM {VLLM_VERSION} refuses this: {why}")


def _eplb(s: dict[str, Any], ep: bool, tp: int, dp: int, pcp: int) -> str | None:
    if not s.get("enable_eplb"):
        return None
    if not ep:
        return "enable_expert_parallel must be True to use EPLB: add --enable-expert-parallel (config/parallel.py)"
    if tp * pcp * dp <= 1:
        return (f"EPLB requires tensor, prefill-context, or data parallelism, but got TP={tp}, PCP={pcp}, DP={dp} "
                "(config/parallel.py)")
    return None


def _ubatching(s: dict[str, Any]) -> str | None:
    if not (s.get("enable_dbo") or (s.get("ubatch_size") or 1) > 1):
        return None
    a2a = s.get("all2all_backend") or DEFAULT_A2A
    if a2a in UBATCH_A2A:
        return None
    return (f"Microbatching (--enable-dbo / --ubatch-size) currently only supports the {', '.join(UBATCH_A2A)} "
            f"all2all backends on this platform, got --all2all-backend {a2a} (config/vllm.py VllmConfig)")


def _draft(s: dict[str, Any], tp: int, dcp: int) -> str | None:
    spec = s.get("speculative_config")
    if not isinstance(spec, dict):
        return None
    draft_tp, draft_dcp = spec.get("draft_tensor_parallel_size"), spec.get("draft_decode_context_parallel_size")
    if draft_tp not in (None, 1, tp):
        return (f"speculative_draft_tensor_parallel_size={draft_tp} cannot be other value than 1 or target model "
                f"tensor_parallel_size ({tp}) (config/speculative.py _verify_and_get_draft_tp)")
    if draft_dcp not in (None, 1, dcp):
        return f"draft_dcp={draft_dcp} must be 1 or {dcp} (config/speculative.py _verify_and_get_draft_dcp)"
    return None


def _nixl(s: dict[str, Any], tp: int, pcp: int, dcp: int) -> str | None:
    kv = s.get("kv_transfer_config")
    if not isinstance(kv, dict) or not _has_connector(kv, "NixlConnector"):
        return None
    size = max(tp, pcp)
    if dcp in (1, size):
        return None
    return (f"decode_context_parallel_size={dcp} must be 1 or equal to the NIXL transfer parallel size={size} "
            "(config/vllm.py VllmConfig.__post_init__)")


def _has_connector(kv: dict[str, Any], name: str) -> bool:
    """config/kv_transfer.py KVTransferConfig.has_connector: directly or inside a MultiConnector."""
    if kv.get("kv_connector") == name:
        return True
    extra = kv.get("kv_connector_extra_config") or {}
    return kv.get("kv_connector") == "MultiConnector" and any(
        isinstance(c, dict) and c.get("kv_connector") == name for c in extra.get("connectors", []))
