"""Hugging Face `config.json` -> MlaConfig, the model description the runtime builds from.

    parse_config(cfg: dict, file) -> MlaConfig   raises ModelLoadError for anything we cannot run

Supported: DeepSeek-V2 (`deepseek_v2`), DeepSeek-V3 (`deepseek_v3`), Kimi K2 (`kimi_k2`), Kimi Linear
(`kimi_linear`, hybrid: parsed by kimi_config.py; loader.read_config returns its MLA part), and wrappers
that nest one of them under `text_config`.

    read_language_model(path) -> (config dict, config.json path)   the unwrapped dict, any supported type
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dcpctl.runtime.models.errors import ModelLoadError
from dcpctl.runtime.models.quant import read_quantization

SUPPORTED_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2")
SUPPORTED_ARCHS = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM")
HYBRID_TYPES, HYBRID_ARCHS = ("kimi_linear",), ("KimiLinearForCausalLM",)
ROPE_TYPES = ("default", "yarn")


@dataclass(frozen=True)
class RopeSpec:
    kind: str  # "default" | "yarn"
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


@dataclass(frozen=True)
class MlaConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    rms_norm_eps: float
    rope: RopeSpec
    tie_word_embeddings: bool = False
    n_routed_experts: int = 0
    n_shared_experts: int = 0
    moe_intermediate_size: int = 0
    top_k: int = 1
    n_group: int = 1
    topk_group: int = 1
    first_k_dense_replace: int = 0
    moe_layer_freq: int = 1
    norm_topk_prob: bool = False
    routed_scaling_factor: float = 1.0
    topk_method: str = "greedy"  # greedy | group_limited_greedy | noaux_tc
    scoring_func: str = "softmax"  # softmax | sigmoid
    rope_fp32: bool = False  # DeepSeek-V2 in HF rotates in fp32 and casts back

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def latent_dim(self) -> int:  # R: one latent KV row
        return self.kv_lora_rank + self.qk_rope_head_dim

    def is_moe_layer(self, i: int) -> bool:
        return (self.n_routed_experts > 0 and i >= self.first_k_dense_replace
                and i % self.moe_layer_freq == 0)


def read_language_model(path: Path) -> tuple[dict[str, Any], Path]:
    """The language model's config dict (unwrapped from `text_config`) and the file it came from."""
    path = Path(path)
    file = path / "config.json" if path.is_dir() else path
    if not file.exists():
        raise ModelLoadError(f"no config.json in {path}")
    try:
        raw = json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise ModelLoadError(f"{file} is not valid JSON: {e}") from e
    return _language_model(raw, file), file


def _hybrid(cfg: dict[str, Any]) -> bool:
    archs = cfg.get("architectures") or []
    return cfg.get("model_type") in HYBRID_TYPES or any(a in HYBRID_ARCHS for a in archs)


def _supported(cfg: dict[str, Any]) -> bool:
    archs = cfg.get("architectures") or []
    return (cfg.get("model_type") in SUPPORTED_TYPES or any(a in SUPPORTED_ARCHS for a in archs)
            or _hybrid(cfg))


def _language_model(raw: dict[str, Any], file: Path) -> dict[str, Any]:
    if _supported(raw):
        return raw
    inner = raw.get("text_config")
    if isinstance(inner, dict) and _supported(inner):
        return inner
    got = raw.get("model_type"), raw.get("architectures")
    raise ModelLoadError(f"{file}: model_type {got[0]!r} (architectures {got[1]}) is not supported; "
                         f"supported model types: {', '.join(SUPPORTED_TYPES + HYBRID_TYPES)}")


def _need(cfg: dict[str, Any], key: str, file: Path) -> Any:
    if cfg.get(key) is None:
        raise ModelLoadError(f"{file}: required key {key!r} is missing")
    return cfg[key]


def parse_config(cfg: dict[str, Any], file: Path = Path("config.json")) -> MlaConfig:
    """Build an MlaConfig from an already-unwrapped language-model config dict."""
    read_quantization(cfg, file)  # block-wise fp8 loads (dequantized); any other method raises here
    for flag in ("attention_bias", "mlp_bias"):
        if cfg.get(flag):
            raise ModelLoadError(f"{file}: {flag}=true is not supported by the bundled runtime")
    mtype = cfg.get("model_type") or ("deepseek_v2" if "DeepseekV2ForCausalLM" in cfg.get("architectures", [])
                                      else "deepseek_v3")
    v3 = mtype != "deepseek_v2"
    n = lambda k: _need(cfg, k, file)  # noqa: E731
    experts = int(cfg.get("n_routed_experts") or 0)
    return _check_moe(MlaConfig(
        model_type=mtype, vocab_size=n("vocab_size"), hidden_size=n("hidden_size"),
        intermediate_size=n("intermediate_size"), num_layers=n("num_hidden_layers"),
        num_heads=n("num_attention_heads"), q_lora_rank=cfg.get("q_lora_rank"),
        kv_lora_rank=n("kv_lora_rank"), qk_nope_head_dim=n("qk_nope_head_dim"),
        qk_rope_head_dim=n("qk_rope_head_dim"), v_head_dim=n("v_head_dim"),
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)), rope=_rope(cfg, file, v3),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        n_routed_experts=experts, n_shared_experts=int(cfg.get("n_shared_experts") or 0),
        moe_intermediate_size=int(cfg.get("moe_intermediate_size") or 0),
        top_k=int(cfg.get("num_experts_per_tok") or 1), n_group=int(cfg.get("n_group") or 1),
        topk_group=int(cfg.get("topk_group") or 1),
        first_k_dense_replace=int(cfg.get("first_k_dense_replace") or 0),
        moe_layer_freq=int(cfg.get("moe_layer_freq") or 1),
        norm_topk_prob=bool(cfg.get("norm_topk_prob", False)),
        routed_scaling_factor=float(cfg.get("routed_scaling_factor") or 1.0),
        topk_method=cfg.get("topk_method") or ("noaux_tc" if v3 else "greedy"),
        scoring_func=cfg.get("scoring_func") or ("sigmoid" if v3 else "softmax"),
        rope_fp32=not v3,
    ), file)


def _check_moe(c: MlaConfig, file: Path) -> MlaConfig:
    if not c.n_routed_experts:
        return c
    if c.n_routed_experts % c.n_group or c.topk_group > c.n_group:
        raise ModelLoadError(f"{file}: n_routed_experts ({c.n_routed_experts}) must be a multiple of n_group "
                             f"({c.n_group}) and topk_group ({c.topk_group}) at most n_group")
    reachable = c.n_routed_experts // c.n_group * (c.topk_group if c.topk_method != "greedy" else c.n_group)
    if c.top_k > reachable:
        raise ModelLoadError(f"{file}: num_experts_per_tok ({c.top_k}) exceeds the {reachable} experts "
                             f"that topk_group ({c.topk_group}) of n_group ({c.n_group}) groups offer")
    return c


def _rope(cfg: dict[str, Any], file: Path, v3: bool) -> RopeSpec:
    rp = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    kind = rp.get("rope_type", rp.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise ModelLoadError(f"{file}: rope type {kind!r} is not supported; supported: {', '.join(ROPE_TYPES)}")
    theta = float(rp.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    interleaved = bool(cfg.get("rope_interleave", True)) if v3 else True
    spec = RopeSpec(kind, theta, int(cfg["qk_rope_head_dim"]), interleaved=interleaved)
    if kind == "default":
        return spec
    max_pos = int(cfg.get("max_position_embeddings", 4096))
    orig = int(rp.get("original_max_position_embeddings") or cfg.get("original_max_position_embeddings") or max_pos)
    factor = rp.get("factor")
    return RopeSpec(kind, theta, spec.dim, float(factor) if factor is not None else max_pos / orig, orig,
                    float(rp.get("beta_fast") or 32), float(rp.get("beta_slow") or 1),
                    float(rp.get("mscale") or 0), float(rp.get("mscale_all_dim") or 0),
                    rp.get("attention_factor"), bool(rp.get("truncate", True)), interleaved)
