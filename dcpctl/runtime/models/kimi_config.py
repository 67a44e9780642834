"""Kimi Linear (`kimi_linear`, KimiLinearForCausalLM) `config.json` -> HybridConfig.

    parse_kimi_linear(cfg: dict, file) -> HybridConfig     raises ModelLoadError

The MLA part is an MlaConfig (NoPE MLA: no rotary at all, softmax scale qk_head_dim^-0.5), so the
DeepSeek attention and MoE code read it unchanged. Key aliases follow transformers'
KimiLinearConfig.attribute_map (num_experts, num_experts_per_token, moe_renormalize,
num_expert_group, num_shared_experts, model_max_length) and its defaults where a key is absent.

Layer kinds: `layer_types` ("full_attention" / "linear_attention"), else
`linear_attn_config.full_attn_layers` (+ optional `kda_layers`), 1-indexed as in checkpoints.
A config with neither is rejected: the planner would read it as all-MLA while transformers
invents a pattern, and the runtime never guesses what the plan did not.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dcpctl.runtime.models.config import MlaConfig, ModelLoadError, RopeSpec, _check_moe, _need

KIMI_LINEAR_TYPES = ("kimi_linear",)
KIMI_LINEAR_ARCHS = ("KimiLinearForCausalLM",)
MLA, KDA = "mla", "kda"
_MLA_NAMES, _KDA_NAMES = ("full_attention", "mla", "attention"), ("linear_attention", "kda")


@dataclass(frozen=True)
class KdaConfig:
    num_heads: int
    head_dim: int  # q, k and v head size alike
    conv_kernel: int  # short causal convolution width


@dataclass(frozen=True)
class HybridConfig:
    """MLA layers (config `mla`) interleaved with KDA layers (config `kda`)."""

    mla: MlaConfig
    kda: KdaConfig
    layer_kinds: tuple[str, ...]  # MLA or KDA per layer
    moe_layers: frozenset[int]

    @property
    def mla_layers(self) -> tuple[int, ...]:
        return tuple(i for i, k in enumerate(self.layer_kinds) if k == MLA)

    @property
    def kda_layers(self) -> tuple[int, ...]:
        return tuple(i for i, k in enumerate(self.layer_kinds) if k == KDA)


def is_kimi_linear(cfg: dict[str, Any]) -> bool:
    archs = cfg.get("architectures") or []
    return cfg.get("model_type") in KIMI_LINEAR_TYPES or any(a in KIMI_LINEAR_ARCHS for a in archs)


def _get(cfg: dict[str, Any], *names: str, default: Any = None) -> Any:
    for n in names:
        if cfg.get(n) is not None:
            return cfg[n]
    return default


def parse_kimi_linear(cfg: dict[str, Any], file: Path = Path("config.json")) -> HybridConfig:
    """Build a HybridConfig from an already-unwrapped kimi_linear config dict."""
    _reject_unsupported(cfg, file)
    layers = int(_need(cfg, "num_hidden_layers", file))
    kinds = _layer_kinds(cfg, layers, file)
    moe = _moe_layers(cfg, layers, file)
    lin = cfg.get("linear_attn_config") or {}
    kda = KdaConfig(int(_get(lin, "num_heads", default=_get(cfg, "linear_num_heads", default=32))),
                    int(_get(lin, "head_dim", default=_get(cfg, "linear_head_dim", default=128))),
                    int(_get(lin, "short_conv_kernel_size", default=_get(cfg, "linear_conv_kernel_dim", default=4))))
    if kda.conv_kernel < 1:
        raise ModelLoadError(f"{file}: short_conv_kernel_size ({kda.conv_kernel}) must be at least 1")
    return HybridConfig(_mla_part(cfg, layers, moe, file), kda, kinds, frozenset(moe))


def _reject_unsupported(cfg: dict[str, Any], file: Path) -> None:
    if cfg.get("quantization_config"):
        raise ModelLoadError(f"{file}: quantized checkpoints are not supported by the bundled runtime")
    for flag in ("attention_bias", "mlp_bias"):
        if cfg.get(flag):
            raise ModelLoadError(f"{file}: {flag}=true is not supported by the bundled runtime")
    if cfg.get("mla_use_nope") is False:
        raise ModelLoadError(f"{file}: mla_use_nope=false (rotary MLA in kimi_linear) is not supported; "
                             "the bundled runtime runs NoPE MLA as transformers does")
    if cfg.get("hidden_act", "silu") != "silu":
        raise ModelLoadError(f"{file}: hidden_act {cfg['hidden_act']!r} is not supported; supported: silu")
    act = cfg.get("moe_router_activation_func", "sigmoid")
    if act not in ("sigmoid", "softmax"):
        raise ModelLoadError(f"{file}: moe_router_activation_func {act!r} is not supported; "
                             "supported: sigmoid, softmax")


def _layer_kinds(cfg: dict[str, Any], n: int, file: Path) -> tuple[str, ...]:
    types = cfg.get("layer_types")
    if types:
        if len(types) != n:
            raise ModelLoadError(f"{file}: len(layer_types) ({len(types)}) != num_hidden_layers ({n})")
        bad = sorted({t for t in types if t not in _MLA_NAMES + _KDA_NAMES})
        if bad:
            raise ModelLoadError(f"{file}: layer_types {bad} unknown; valid: {list(_MLA_NAMES + _KDA_NAMES)}")
        return tuple(MLA if t in _MLA_NAMES else KDA for t in types)
    lin = cfg.get("linear_attn_config") or {}
    if not lin.get("full_attn_layers"):
        raise ModelLoadError(f"{file}: kimi_linear config names no layer kinds: give layer_types or "
                             "linear_attn_config.full_attn_layers (1-indexed)")
    full = [int(i) for i in lin["full_attn_layers"]]
    kda = [int(i) for i in lin.get("kda_layers") or [i for i in range(1, n + 1) if i not in full]]
    out_of_range = [i for i in full + kda if not 1 <= i <= n]
    if out_of_range or sorted(full + kda) != list(range(1, n + 1)):
        raise ModelLoadError(f"{file}: linear_attn_config full_attn_layers {full} and kda_layers {kda} "
                             f"must cover layers 1..{n} (1-indexed) exactly once")
    return tuple(MLA if i + 1 in full else KDA for i in range(n))


def _moe_layers(cfg: dict[str, Any], n: int, file: Path) -> list[int]:
    types = cfg.get("mlp_layer_types")
    experts = int(_get(cfg, "num_experts", "num_local_experts", "n_routed_experts", default=0))
    if types:
        if len(types) != n or any(t not in ("dense", "sparse") for t in types):
            raise ModelLoadError(f"{file}: mlp_layer_types must list 'dense' or 'sparse' for each of the "
                                 f"{n} layers, got {types}")
        return [i for i, t in enumerate(types) if t == "sparse"] if experts else []
    first = int(_get(cfg, "first_k_dense_replace", default=1))
    freq = int(_get(cfg, "moe_layer_freq", default=1))
    return [i for i in range(n) if experts and i >= first and i % freq == 0]


def _mla_part(cfg: dict[str, Any], n_layers: int, moe: list[int], file: Path) -> MlaConfig:
    n = lambda k: _need(cfg, k, file)  # noqa: E731
    rope = int(n("qk_rope_head_dim"))
    dense_prefix = next((i for i in range(n_layers) if i in moe), n_layers)
    return _check_moe(MlaConfig(
        model_type="kimi_linear", vocab_size=n("vocab_size"), hidden_size=n("hidden_size"),
        intermediate_size=n("intermediate_size"), num_layers=n_layers, num_heads=n("num_attention_heads"),
        q_lora_rank=cfg.get("q_lora_rank"), kv_lora_rank=n("kv_lora_rank"),
        qk_nope_head_dim=n("qk_nope_head_dim"), qk_rope_head_dim=rope, v_head_dim=n("v_head_dim"),
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-5)), rope=RopeSpec("none", 0.0, rope),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        n_routed_experts=int(_get(cfg, "num_experts", "num_local_experts", "n_routed_experts", default=0)),
        n_shared_experts=int(_get(cfg, "num_shared_experts", "n_shared_experts", default=1)),
        moe_intermediate_size=int(cfg.get("moe_intermediate_size") or 0),
        top_k=int(_get(cfg, "num_experts_per_token", "num_experts_per_tok", default=8)),
        n_group=int(_get(cfg, "num_expert_group", "n_group", default=1)),
        topk_group=int(_get(cfg, "topk_group", default=1)),
        first_k_dense_replace=dense_prefix, moe_layer_freq=1,
        norm_topk_prob=bool(_get(cfg, "moe_renormalize", "norm_topk_prob", default=True)),
        routed_scaling_factor=float(_get(cfg, "routed_scaling_factor", default=2.446)),
        topk_method="noaux_tc", scoring_func=str(cfg.get("moe_router_activation_func", "sigmoid")),
    ), file)
