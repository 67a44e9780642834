"""What Hugging Face transformers reads for a key absent from config.json: per family, its config class's
default and its `attribute_map` aliases (DeepseekV2Config, DeepseekV3Config, KimiLinearConfig, 5.x).

tests/plan/test_hf_config.py checks every entry against the installed transformers classes.
Kimi K2 (`kimi_k2`) and Kimi K3 (`kimi_k3`) use DeepSeek-V3's key names, so they take its family.
"""
from __future__ import annotations

from typing import Any

V2, V3, KIMI_LINEAR = "deepseek_v2", "deepseek_v3", "kimi_linear"
FAMILIES = (V2, V3, KIMI_LINEAR)
HF_CLASSES = {V2: "DeepseekV2Config", V3: "DeepseekV3Config", KIMI_LINEAR: "KimiLinearConfig"}

# field -> its key in config.json, then the aliases transformers maps onto it, per family
KEYS: dict[str, dict[str, tuple[str, ...]]] = {
    "n_routed_experts": {V2: ("n_routed_experts", "num_experts"),
                         V3: ("n_routed_experts", "num_local_experts"),
                         KIMI_LINEAR: ("num_experts", "num_local_experts")},
    "num_experts_per_tok": {KIMI_LINEAR: ("num_experts_per_tok", "num_experts_per_token")},
    "n_shared_experts": {KIMI_LINEAR: ("n_shared_experts", "num_shared_experts")},
    "n_group": {KIMI_LINEAR: ("n_group", "num_expert_group")},
    "norm_topk_prob": {KIMI_LINEAR: ("norm_topk_prob", "moe_renormalize")},
    "max_position_embeddings": {KIMI_LINEAR: ("max_position_embeddings", "model_max_length")},
}

# field -> default per family (None: transformers' default is None too)
DEFAULTS: dict[str, dict[str, Any]] = {
    "vocab_size": {V2: 102400, V3: 129280, KIMI_LINEAR: 163840},
    "intermediate_size": {V2: 11008, V3: 18432, KIMI_LINEAR: 9216},
    "moe_intermediate_size": {V2: 1407, V3: 2048, KIMI_LINEAR: 1024},
    "q_lora_rank": {V2: 1536, V3: 1536, KIMI_LINEAR: None},
    "qk_nope_head_dim": {V2: 128, V3: 128, KIMI_LINEAR: 128},
    "qk_rope_head_dim": {V2: 64, V3: 64, KIMI_LINEAR: 64},
    "v_head_dim": {V2: 128, V3: 128, KIMI_LINEAR: 128},
    "n_routed_experts": {V2: 64, V3: 256, KIMI_LINEAR: 256},
    "num_experts_per_tok": {V2: None, V3: 8, KIMI_LINEAR: 8},
    "n_shared_experts": {V2: 2, V3: 1, KIMI_LINEAR: 1},
    "n_group": {V2: None, V3: 8, KIMI_LINEAR: 1},
    "topk_group": {V2: None, V3: 4, KIMI_LINEAR: 1},
    "first_k_dense_replace": {V2: 0, V3: 3, KIMI_LINEAR: 1},
    "norm_topk_prob": {V2: False, V3: True, KIMI_LINEAR: True},
    "routed_scaling_factor": {V2: 1.0, V3: 2.5, KIMI_LINEAR: 2.446},
    "rms_norm_eps": {V2: 1e-6, V3: 1e-6, KIMI_LINEAR: 1e-5},
    "max_position_embeddings": {V2: 2048, V3: 4096, KIMI_LINEAR: 1048576},
    "tie_word_embeddings": {V2: False, V3: False, KIMI_LINEAR: False},
}


def keys(field: str, family: str) -> tuple[str, ...]:
    """config.json keys that set `field` in `family`, first wins."""
    return KEYS.get(field, {}).get(family, (field,))


def first(cfg: dict[str, Any], *names: str) -> Any:
    """The value of the first of `names` that `cfg` holds and is not null."""
    return next((cfg[n] for n in names if cfg.get(n) is not None), None)


def value(cfg: dict[str, Any], field: str, family: str) -> Any:
    """`field` as transformers reads it from `cfg`: its key or an alias, else the family's default."""
    got = first(cfg, *keys(field, family))
    return DEFAULTS[field][family] if got is None else got
