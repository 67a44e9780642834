"""The runtime's model description, built from the one config.json parse (plan/hf_config.py HfConfig).

    read_model_config(path) -> HfConfig             ModelLoadError for a file the parse refuses
    mla_config(hc) -> MlaConfig                     ModelLoadError for anything the runtime cannot run
    parse_config(cfg: dict, file) -> MlaConfig      the same from a dict in memory (tiny.py, tests)

Supported: the families of plan/model_registry.py that name a runtime builder (DeepSeek-V2, DeepSeek-V3,
Kimi K2; Kimi Linear, hybrid: kimi_config.py, whose MLA part loader.read_config returns), and wrappers
that nest one of them under `text_config`. Block-FP8 weights are parsed by quant.py, from
`HfConfig.quantization`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dcpctl.plan.errors import UserError
from dcpctl.plan.hf_config import HfConfig, MlaShape, RopeSpec, parse_hf_config, read_hf_config
from dcpctl.plan.hf_defaults import V2
from dcpctl.plan.model_registry import RUNTIME_MODEL_TYPES, Family, family_of
from dcpctl.runtime.errors import ModelLoadError

ROPE_TYPES = ("default", "yarn")
__all__ = ["MlaConfig", "ModelLoadError", "RopeSpec", "mla_config", "parse_config", "read_model_config"]


@dataclass(frozen=True)
class MlaConfig(MlaShape):
    """What the runtime builds a DeepSeek-style model from: the shared sizes plus norms, rope and routing."""

    model_type: str
    rms_norm_eps: float
    rope: RopeSpec
    tie_word_embeddings: bool = False
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
        return self.kv_row_elems

    def is_moe_layer(self, i: int) -> bool:
        return (self.n_routed_experts > 0 and i >= self.first_k_dense_replace
                and i % self.moe_layer_freq == 0)


def read_model_config(path: str | Path) -> HfConfig:
    """The parse of `path/config.json` (or a config.json path), its errors as ModelLoadError."""
    try:
        return read_hf_config(path)
    except UserError as e:  # ConfigError, or a file that cannot be read
        raise ModelLoadError(str(e)) from None


def parsed(cfg: dict[str, Any], file: Path = Path("config.json")) -> HfConfig:
    """The parse of a config dict in memory, its errors as ModelLoadError."""
    try:
        return parse_hf_config(cfg, str(file))
    except UserError as e:  # ConfigError, or a file that cannot be read
        raise ModelLoadError(str(e)) from None


def parse_config(cfg: dict[str, Any], file: Path = Path("config.json")) -> MlaConfig:
    """Build an MlaConfig from a DeepSeek-V2/V3 (or Kimi K2) config dict."""
    return mla_config(parsed(cfg, file))


def runtime_family(hc: HfConfig) -> Family:
    """The model registry's family of `hc` (plan/model_registry.py); ModelLoadError unless the bundled runtime
    builds it (a family with a builder, whose layers may be KDA only where the family says so)."""
    fam = family_of(hc.model_type, hc.architectures)
    if fam is None or fam.build is None or fam.mla_config is None or (hc.kda_layers and not fam.kda):
        raise ModelLoadError(f"{hc.source}: model_type {hc.model_type!r} (architectures "
                             f"{list(hc.architectures)}) is not supported by the bundled runtime; supported "
                             f"model types: {', '.join(RUNTIME_MODEL_TYPES)}")
    return fam


def check_runnable(hc: HfConfig) -> None:
    """ModelLoadError unless the bundled runtime runs this architecture (any family: the flags it refuses)."""
    runtime_family(hc)
    for flag in ("attention_bias", "mlp_bias"):
        if getattr(hc, flag):
            raise ModelLoadError(f"{hc.source}: {flag}=true is not supported by the bundled runtime")


def mla_config(hc: HfConfig) -> MlaConfig:
    """The runtime's description of a DeepSeek-V2/V3 (or Kimi K2) model."""
    check_runnable(hc)
    if hc.rope.kind not in ROPE_TYPES:
        raise ModelLoadError(f"{hc.source}: rope type {hc.rope.kind!r} is not supported; supported: "
                             f"{', '.join(ROPE_TYPES)}")
    v3 = hc.family != V2
    return _check_moe(MlaConfig(
        model_type=hc.model_type or ("deepseek_v3" if v3 else "deepseek_v2"), rope=hc.rope, rope_fp32=not v3,
        first_k_dense_replace=hc.first_k_dense_replace, moe_layer_freq=hc.moe_layer_freq,
        topk_method=hc.topk_method, scoring_func=hc.scoring_func, **shared_fields(hc)), Path(hc.source))


def shared_fields(hc: HfConfig) -> dict[str, Any]:
    """MlaConfig fields that read the same for every family."""
    if hc.n_routed_experts and hc.num_experts_per_tok is None:
        raise ModelLoadError(f"{hc.source}: num_experts_per_tok is missing and {hc.family}'s transformers "
                             f"config has no default for it")
    return dict(hc.shape(), rms_norm_eps=hc.rms_norm_eps, tie_word_embeddings=hc.tie_word_embeddings,
                top_k=hc.num_experts_per_tok or 1, n_group=hc.n_group or 1, topk_group=hc.topk_group or 1,
                norm_topk_prob=hc.norm_topk_prob, routed_scaling_factor=hc.routed_scaling_factor)


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
