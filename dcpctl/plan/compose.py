"""Compositions with DCP checked at plan time (docs/design.md section 5): spec decoding, PD, HiCache."""
from __future__ import annotations

from typing import Any

from dcpctl.plan.errors import Violation
from dcpctl.plan.request import PlanRequest


def check_compositions(req: PlanRequest, kv_dtype: str) -> tuple[dict[str, Any], list[Violation], list[str]]:
    """Returns (summary, violations, warnings). Rules apply when dcp > 1; dcp 1 is plain SGLang."""
    out: dict[str, Any] = {}
    viol: list[Violation] = []
    warn: list[str] = []
    _speculative(req, out, viol)
    _disaggregation(req, kv_dtype, out, viol, warn)
    _hicache(req, out, viol, warn)
    _context(req, viol)
    if req.model.kda is not None and req.topology.dcp_size > 1:
        out["hybrid"] = {"striped_layers": "mla", "kda_layers": len(req.model.kda_layers),
                         "note": "KDA state is request-indexed and not striped: DCP grows long-context "
                                 "capacity, not the KDA concurrency ceiling"}
    return out, viol, warn


def _speculative(req: PlanRequest, out: dict[str, Any], viol: list[Violation]) -> None:
    """Parameters and their rules: dcpctl.plan.speculative (a decision); here only the summary."""
    algo, k = req.speculative_algorithm, req.speculative_num_draft_tokens
    if not algo:
        return
    out["speculative"] = {"algorithm": algo, "num_draft_tokens": k,
                          "verification": "static (same width per request)",
                          "draft_kv": "replicated on every rank (not striped)"}


def _disaggregation(req: PlanRequest, kv_dtype: str, out: dict[str, Any], viol: list[Violation],
                    warn: list[str]) -> None:
    mode = req.disaggregation_mode
    if mode == "null":
        peer_opts = [f"--{k.replace('_', '-')}"
                     for k in ("disaggregation_peer_dcp_size", "disaggregation_peer_page_size",
                               "disaggregation_peer_kv_cache_dtype")
                     if getattr(req, k) is not None]
        if peer_opts:
            warn.append(f"{', '.join(peer_opts)} ignored: no --disaggregation-mode prefill|decode")
        return
    c = req.topology.dcp_size
    peer = req.disaggregation_peer_dcp_size or c
    prefill, decode = (c, peer) if mode == "prefill" else (peer, c)
    if prefill == decode:
        path = "page path with matching DCP ranks"
    elif prefill == 1:
        path = f"token relayout from DCP 1 prefill to DCP {decode} decode (exact token count per rank)"
    else:
        path = None
        viol.append(Violation("pd_dcp_sizes", f"prefill dcp ({prefill}) -> decode dcp ({decode}) is not "
                              "supported: use equal sizes or dcp 1 prefill; valid prefill sizes: [1, "
                              f"{decode}]"))
    _pd_rules(req, kv_dtype, mode, max(prefill, decode) > 1, viol, warn)
    out["disaggregation"] = {"mode": mode, "prefill_dcp": prefill, "decode_dcp": decode, "transfer": path,
                             "backend": req.disaggregation_transfer_backend,
                             "decode_cache": "chunk cache (no radix cache)" if mode == "decode" else None}


def _pd_rules(req: PlanRequest, kv_dtype: str, mode: str, dcp: bool, viol: list[Violation],
              warn: list[str]) -> None:
    """Page size and KV dtype must match for every PD pair; the rest applies when DCP is used."""
    if req.disaggregation_transfer_backend == "fake":
        if mode == "prefill":  # SGLang 0.5.23 disaggregation hook: a decode-side test backend only
            viol.append(Violation("pd_fake_prefill", "--disaggregation-transfer-backend fake runs only on "
                                  "the decode side (a test backend that moves no KV); use mooncake or nixl "
                                  "for prefill"))
        else:
            warn.append("--disaggregation-transfer-backend fake moves no KV: a decode-side test setup")
    peer_page = req.disaggregation_peer_page_size
    if peer_page is not None and peer_page != req.page_size:
        viol.append(Violation("pd_page_size", f"page_size ({req.page_size}) != peer page_size ({peer_page}); "
                              "prefill and decode must match"))
    peer_kv = req.disaggregation_peer_kv_cache_dtype
    if peer_kv is not None and peer_kv not in ("auto", kv_dtype):
        viol.append(Violation("pd_kv_dtype", f"kv_cache_dtype ({kv_dtype}) != peer kv_cache_dtype "
                              f"({peer_kv}); prefill and decode must match"))
    if mode == "decode" and req.enable_hierarchical_cache:
        viol.append(Violation("pd_decode_hicache", "PD decode does not support --enable-hierarchical-cache: "
                              "the decode side runs without the radix cache (chunk cache)"))


def _hicache(req: PlanRequest, out: dict[str, Any], viol: list[Violation], warn: list[str]) -> None:
    if not req.enable_hierarchical_cache:
        if req.hicache_storage_backend:  # SGLang ignores it then
            warn.append(f"--hicache-storage-backend {req.hicache_storage_backend} ignored: no "
                        "--enable-hierarchical-cache")
        return
    c = req.topology.dcp_size
    out["hicache"] = {"l2": f"host tier with {req.page_size * c} virtual slots per page, {req.page_size} "
                            "local rows per rank; no DCP collective",
                      "l3": f"{req.hicache_storage_backend}: sharded per DCP rank"
                      if req.hicache_storage_backend else None}
    if c == 1:
        return
    if req.speculative_algorithm not in (None, "DSPARK"):  # arg_groups/hicache_hook.py
        viol.append(Violation("hicache_spec", f"HiCache with dcp ({c}) > 1 supports only DSPARK speculative "
                              f"decoding, got --speculative-algorithm {req.speculative_algorithm}"))


LONGER_CONTEXT_OVERRIDE = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"  # configs/model_config.py


def past_positions(req: PlanRequest, context: int) -> str | None:
    """Why `context` cannot be served, when it is past the model's positions (else None)."""
    top = req.model.max_position_embeddings
    if top and context > top:
        return f"past the model's {top:,} positions (SGLang refuses it unless {LONGER_CONTEXT_OVERRIDE})"
    return None


def _context(req: PlanRequest, viol: list[Violation]) -> None:
    """SGLang refuses a context length above the model's (configs/model_config.py, derived context_length)."""
    n, top = req.context_len, req.model.max_position_embeddings
    if n is not None and n > top:
        viol.append(Violation("context_len_model", f"--context-length ({n}) > the model's "
                              f"max_position_embeddings ({top}); SGLang refuses it unless "
                              f"{LONGER_CONTEXT_OVERRIDE}"))
