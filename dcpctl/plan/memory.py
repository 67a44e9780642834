"""Memory per rank: latent KV, weights, replicated-Q overhead, capacity and the real DCP gain.

    kv_bytes_per_token          = mla_layers * (kv_lora + rope) * kv_dtype_bytes      (whole model)
    kv_bytes_per_token_per_rank = kv_bytes_per_token / dcp
    per virtual token, a rank stores target_row / dcp + draft_row (draft KV is never striped)
    virtual capacity V          = kv_budget // (that), rounded down to widened pages (P * dcp)

The MHA-form prefill (runtime/attention/mha.py) holds, per rank and for one MLA layer at a time, one key
block of up-projected K/V (at most MHA_BLOCK_BYTES), the chunk's group query, its fp32 accumulator and,
with dcp > 1, the exchange buffers: `mha_prefill_transient`, outside the KV budget (in the
1 - mem_fraction_static headroom, like every activation).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dcpctl.plan.request import DEFAULT_CHUNKED_PREFILL
from dcpctl.plan.errors import Violation
from dcpctl.plan.model import DTYPE_BYTES, ModelSpec
from dcpctl.plan.request import PlanRequest
from dcpctl.plan.weights import weight_bytes, weight_format

GIB = 2**30
MHA_BLOCK_BYTES = GIB   # the MHA form's up-projected K/V of one key block, at most (runtime/attention/mha.py)


def kv_row_bytes(m: ModelSpec, kv_dtype: str, layers: int | None = None) -> int:
    n = len(m.mla_layers) if layers is None else layers
    return n * m.kv_row_elems * DTYPE_BYTES[kv_dtype]


def weights_and_replicated_q(req: PlanRequest, replicate_q: bool) -> tuple[int, int]:
    """(weight bytes per rank, the extra of replicated Q): what the bundled runtime's loader keeps
    (weights.py); the extra is the DCP group's q_b_proj rows (FP8 where the checkpoint is) and w_kc."""
    m, t = req.model, req.topology
    fp8 = weight_format(m, req.hardware)[0]
    weights = weight_bytes(m, t, False, fp8)
    on = replicate_q and t.dcp_size > 1
    return weights, (weight_bytes(m, t, True, fp8) - weights) if on else 0


def mha_prefill_transient(m: ModelSpec, dcp: int, attn_tp: int, chunk: int = DEFAULT_CHUNKED_PREFILL) -> int:
    """Bytes one rank holds beside its KV while one MLA layer of a `chunk`-token prefill runs in the MHA
    form."""
    b = {"float64": 8, "float32": 4}.get(m.dtype, 2)          # the compute dtype (FP8 checkpoints compute in
                                                              # bf16)
    hk = m.num_heads // attn_tp * dcp                        # kernel heads: the DCP group's
    if hk == 0:                                              # fewer heads than attention-TP ranks: a
                                                             # violation
        return 0
    qk, v, nope = m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim, m.qk_nope_head_dim
    row = hk * (nope + v + qk) * b                           # one key row up-projected (GEMM output, then K)
    block = min(MHA_BLOCK_BYTES // row * row, -(-m.max_position_embeddings // dcp) * row)
    query = chunk * hk * qk * b
    acc = chunk * hk * (v + 1) * max(b, 4) + chunk * hk * (v + 1) * b    # accumulator + one partial
    wire = 2 * chunk * hk * (v + 2) * b if dcp > 1 else 0                            # a2a send + receive
    return block + query + acc + wire


@dataclass(frozen=True)
class Capacity:
    virtual_tokens: int
    physical_rows: int
    kda_ceiling: int | None


def capacity(req: PlanRequest, kv_dtype: str, budget: int, dcp: int) -> Capacity:
    """KV capacity of one rank's budget at DCP size `dcp` (the memory not taken by weights)."""
    m, t = req.model, req.topology
    stage_layers = -(-len(m.mla_layers) // t.pp_size)
    kda_ceiling = None
    if m.kda is not None:
        state = kda_state_bytes_per_rank(req)
        kda_pool = int(budget * req.kda_state_fraction)
        kda_ceiling = kda_pool // state if state else None
        budget -= kda_pool
    target = kv_row_bytes(m, kv_dtype, stage_layers)
    draft = draft_row_bytes(req, kv_dtype)
    per_virtual = target / dcp + draft
    page = req.page_size * dcp
    virtual = int(max(budget, 0) // per_virtual) // page * page
    return Capacity(virtual, virtual // dcp, kda_ceiling)


def draft_row_bytes(req: PlanRequest, kv_dtype: str) -> int:
    if not req.speculative_algorithm or req.speculative_algorithm == "NGRAM":
        return 0
    draft = req.draft_model
    if draft is None:  # EAGLE / NEXTN: one MTP layer shaped like the target's MLA layer
        return kv_row_bytes(req.model, kv_dtype, 1)
    return kv_row_bytes(draft, kv_dtype)


def kda_state_bytes_per_rank(req: PlanRequest) -> int:
    m = req.model
    if m.kda is None:
        return 0
    layers = -(-len(m.kda_layers) // req.topology.pp_size)
    return m.kda.state_bytes_per_layer() * layers // req.topology.attn_tp


def prefill_chunk_tokens(req: PlanRequest) -> int:
    """The longest prefill chunk: the plan's chunked-prefill size (the one perf.py's TTFT runs at), or without
    chunking (<= 0, as perf_prefill.chunks reads it) the longest prompt, the context."""
    size = req.chunked_prefill_size
    return size if size > 0 else req.context_len or req.model.max_position_embeddings


def memory_report(req: PlanRequest, kv_dtype: str, replicate_q: bool,
                  memory_option: str = "mem_fraction_static"
                  ) -> tuple[dict[str, Any], list[Violation]]:
    """memory_option: the engine's name of req.mem_fraction_static, for the weights_fit message."""
    m, t, hw = req.model, req.topology, req.hardware
    per_rank_mem = hw.memory_gib * GIB / (t.ranks_per_node if hw.device == "cpu" else 1)
    weights, rep_q = weights_and_replicated_q(req, replicate_q)
    static = per_rank_mem * req.mem_fraction_static
    chunk = prefill_chunk_tokens(req)
    budget = int(static - weights - rep_q)
    viol: list[Violation] = []
    if budget <= 0:
        viol.append(Violation("weights_fit", f"weights per rank ({(weights + rep_q) / GIB:.1f} GiB) exceed "
                              f"{memory_option} ({req.mem_fraction_static}) * memory "
                              f"({per_rank_mem / GIB:.1f} GiB) = {static / GIB:.1f} GiB; raise tp/ep or use "
                              "a larger GPU"))
    cap = capacity(req, kv_dtype, budget, t.dcp_size)
    base = capacity(req, kv_dtype, int(static - weights), 1)
    kv_tok = kv_row_bytes(m, kv_dtype)
    out: dict[str, Any] = {
        "kv_cache_dtype": kv_dtype,
        "kv_bytes_per_token": kv_tok,
        "kv_bytes_per_token_per_rank": kv_tok / t.dcp_size,
        "draft_kv_bytes_per_token_per_rank": draft_row_bytes(req, kv_dtype),
        "memory_per_rank_bytes": int(per_rank_mem),
        "weight_bytes_per_rank": weights,
        "weight_format": weight_format(m, hw)[1],
        "replicated_q_bytes_per_rank": rep_q,
        "mha_prefill_transient_bytes_per_rank": mha_prefill_transient(m, t.dcp_size, t.attn_tp, chunk),
        "mha_prefill_chunk_tokens": chunk,
        "kv_budget_bytes_per_rank": max(budget, 0),
        "kv_rows_per_rank": cap.physical_rows,
        "kv_virtual_tokens": cap.virtual_tokens,
        "max_context_len": min(cap.virtual_tokens, m.max_position_embeddings),
        "max_context_limited_by": "kv_capacity" if cap.virtual_tokens < m.max_position_embeddings
        else "max_position_embeddings",
        "capacity_gain_vs_dcp1": round(cap.virtual_tokens / base.virtual_tokens, 4)
        if base.virtual_tokens else None,
        "nominal_gain": t.dcp_size,
    }
    if m.kda is not None:
        out["kda_state_bytes_per_request_per_rank"] = kda_state_bytes_per_rank(req)
        out["kda_max_requests"] = cap.kda_ceiling
    if req.context_len:
        out.update(_concurrency(req, cap, base))
    return out, viol


def _concurrency(req: PlanRequest, cap: Capacity, base: Capacity) -> dict[str, Any]:
    L, t = req.context_len, req.topology
    assert L is not None

    def fit(c: Capacity, dcp: int) -> int:
        page = req.page_size * dcp
        n = c.virtual_tokens // (-(-L // page) * page)
        n = min(n, c.kda_ceiling) if c.kda_ceiling is not None else n
        return min(n, req.max_running_requests) if req.max_running_requests else n

    n, n1 = fit(cap, t.dcp_size), fit(base, 1)
    limited = "kda_state" if cap.kda_ceiling is not None and n == cap.kda_ceiling else "kv_capacity"
    return {"context_len": L, "max_concurrency": n, "max_concurrency_dcp1": n1,
            "concurrency_gain_vs_dcp1": round(n / n1, 4) if n1 else None, "concurrency_limited_by": limited}
