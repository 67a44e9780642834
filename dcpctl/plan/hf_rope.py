"""The rotary embedding a config.json asks for (torch-free): DeepSeek's plain or YaRN rope, or none (NoPE).

`rope_parameters` (transformers 5.x) or `rope_scaling` (older files) with `rope_type` / `type`;
`rope_theta` there or at the top level. Kinds other than default and yarn are parsed as named and
refused by the runtime (runtime/models/config.py), not here: the planner does not need the rope.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dcpctl.plan.hf_defaults import V2, value


@dataclass(frozen=True)
class RopeSpec:
    kind: str  # "default" | "yarn" | "none" (NoPE); others are parsed and refused by the runtime
    theta: float
    dim: int
    factor: float = 1.0
    original_max: int = 4096
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float = 0.0
    mscale_all_dim: float = 0.0
    attention_factor: float | None = None
    truncate: bool = True
    interleaved: bool = True  # DeepSeek pairs (x0, x1), (x2, x3), ... rotate together


def read_rope(lm: dict[str, Any], family: str, nope: bool) -> RopeSpec:
    """The rotary embedding of a language-model config dict (`nope`: none at all)."""
    dim = int(value(lm, "qk_rope_head_dim", family))
    if nope:
        return RopeSpec("none", 0.0, dim)
    rp = dict(lm.get("rope_parameters") or lm.get("rope_scaling") or {})
    kind = str(rp.get("rope_type", rp.get("type", "default")))
    theta = float(rp.get("rope_theta", lm.get("rope_theta", 10000.0)))
    interleaved = bool(lm.get("rope_interleave", True)) if family != V2 else True
    if kind != "yarn":
        return RopeSpec(kind, theta, dim, interleaved=interleaved)
    max_pos = int(value(lm, "max_position_embeddings", family))
    orig = int(rp.get("original_max_position_embeddings") or lm.get("original_max_position_embeddings")
               or max_pos)
    factor = rp.get("factor")
    return RopeSpec(kind, theta, dim, float(factor) if factor is not None else max_pos / orig, orig,
                    float(rp.get("beta_fast") or 32), float(rp.get("beta_slow") or 1),
                    float(rp.get("mscale") or 0), float(rp.get("mscale_all_dim") or 0),
                    rp.get("attention_factor"), bool(rp.get("truncate", True)), interleaved)
