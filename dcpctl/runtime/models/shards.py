"""Which slice of every weight this rank owns: pure integer math from the config and the groups.

| weight                 | split over                         | this rank's part                             |
| ---------------------- | ---------------------------------- | -------------------------------------------- |
| attention heads        | attention TP                       | [r*H/attn_tp, (r+1)*H/attn_tp)               |
| q heads, replicated Q  | the DCP group's attention-TP ranks | [g*H/attn_tp, (g+dcp)*H/attn_tp),            |
|                        |                                    | g = r - dcp_rank                             |
| kv_b_proj (MHA form)   | the DCP group's attention-TP ranks | the same group heads, replicated Q or not    |
| routed experts         | EP (ep = ps.ep.size)               | [e*E/ep, (e+1)*E/ep)                         |
| expert intermediate    | moe_tp = tp / ep                   | tp_rank % moe_tp                             |
| dense / shared MLP     | TP                                 | tp_rank                                      |
| vocab (embed, lm_head) | attention TP, padded to ceil(V/n)  | [r*Vp, min((r+1)*Vp, V))                     |
"""
from __future__ import annotations

from dataclasses import dataclass

from dcpctl.runtime.models.config import MlaConfig, ModelLoadError
from dcpctl.runtime.parallel import ParallelState


@dataclass(frozen=True)
class Shards:
    head_start: int  # first local head
    heads: int  # local heads (H / attn_tp)
    q_head_start: int  # first head this rank computes q for
    q_heads: int  # heads or heads * dcp under replicated Q
    q_is_group: bool
    group_head_start: int  # first head of this rank's DCP group (the MHA form attends them all)
    group_heads: int  # heads * dcp
    tp_rank: int
    tp_size: int
    moe_tp_rank: int
    moe_tp_size: int
    expert_start: int
    expert_end: int
    vocab_start: int
    vocab_end: int
    vocab_padded: int  # rows per attention-TP rank after padding


def split(n: int, parts: int, idx: int, what: str, over: str) -> tuple[int, int]:
    """[start, end) of part idx of n items cut into `parts` equal pieces."""
    if n % parts:
        raise ModelLoadError(f"{what} ({n}) is not a multiple of {over} ({parts})")
    size = n // parts
    return idx * size, (idx + 1) * size


def plan_shards(cfg: MlaConfig, ps: ParallelState, replicate_q: bool) -> Shards:
    attn_tp, r = ps.attn_tp.size, ps.attn_tp.rank
    h0, h1 = split(cfg.num_heads, attn_tp, r, "num_attention_heads", "attn_tp")
    heads = h1 - h0
    group = replicate_q and ps.dcp.size > 1
    g0, gn = (r - ps.dcp.rank) * heads, heads * ps.dcp.size
    q0, qn = (g0, gn) if group else (h0, heads)
    ep = ps.ep.size
    if ps.tp.size % ep:
        raise ModelLoadError(f"tp ({ps.tp.size}) is not a multiple of ep ({ep})")
    moe_tp = ps.tp.size // ep
    e0, e1 = split(cfg.n_routed_experts, ep, ps.ep.rank, "n_routed_experts", "ep") \
        if cfg.n_routed_experts else (0, 0)
    vp = -(-cfg.vocab_size // attn_tp)
    v0 = min(r * vp, cfg.vocab_size)
    return Shards(h0, heads, q0, qn, group, g0, gn, ps.tp.rank, ps.tp.size, ps.tp.rank % moe_tp, moe_tp,
                  e0, e1, v0, min(v0 + vp, cfg.vocab_size), vp)
