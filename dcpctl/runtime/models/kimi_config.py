"""Kimi Linear (`kimi_linear`, KimiLinearForCausalLM): the one config.json parse -> HybridConfig.

    hybrid_config(hc: HfConfig) -> HybridConfig            raises ModelLoadError
    parse_kimi_linear(cfg: dict, file) -> HybridConfig     the same from a dict in memory

The MLA part is an MlaConfig (NoPE MLA: no rotary at all, softmax scale qk_head_dim^-0.5), so the
DeepSeek attention and MoE code read it unchanged. Keys, aliases and defaults are transformers'
KimiLinearConfig's (plan/hf_defaults.py); layer kinds and MoE layers come from plan/hf_layers.py.
A config that names no layer kinds is rejected: the planner would read it as all-MLA while
transformers invents a pattern, and the runtime never guesses what the plan did not.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dcpctl.plan.hf_config import HfConfig
from dcpctl.plan.hf_layers import KDA, MLA, KdaShape
from dcpctl.runtime.models.config import (MlaConfig, ModelLoadError, RopeSpec, _check_moe, check_runnable,
                                          parsed, shared_fields)

KdaConfig = KdaShape  # num_heads, head_dim (q, k and v alike), conv_kernel (short causal convolution width)
__all__ = ["HybridConfig", "KDA", "KdaConfig", "MLA", "hybrid_config", "parse_kimi_linear"]


@dataclass(frozen=True)
class HybridConfig:
    """MLA layers (config `mla`) interleaved with KDA layers (config `kda`)."""

    mla: MlaConfig
    kda: KdaShape
    layer_kinds: tuple[str, ...]  # MLA or KDA per layer
    moe_layers: frozenset[int]

    @property
    def mla_layers(self) -> tuple[int, ...]:
        return tuple(i for i, k in enumerate(self.layer_kinds) if k == MLA)

    @property
    def kda_layers(self) -> tuple[int, ...]:
        return tuple(i for i, k in enumerate(self.layer_kinds) if k == KDA)


def parse_kimi_linear(cfg: dict[str, Any], file: Path = Path("config.json")) -> HybridConfig:
    """Build a HybridConfig from a kimi_linear config dict."""
    return hybrid_config(parsed(cfg, file))


def hybrid_config(hc: HfConfig) -> HybridConfig:
    """The runtime's description of a Kimi Linear model."""
    _reject_unsupported(hc)
    if hc.layer_kinds is None or hc.kda is None:
        raise ModelLoadError(f"{hc.source}: kimi_linear config names no layer kinds: give layer_types or "
                             "linear_attn_config.full_attn_layers (1-indexed)")
    dense_prefix = min(hc.moe_layers, default=hc.num_layers)
    mla = _check_moe(MlaConfig(
        model_type="kimi_linear", rope=RopeSpec("none", 0.0, hc.qk_rope_head_dim),
        first_k_dense_replace=dense_prefix, moe_layer_freq=1, topk_method="noaux_tc",
        scoring_func=hc.scoring_func, **shared_fields(hc)), Path(hc.source))
    return HybridConfig(mla, hc.kda, hc.layer_kinds, frozenset(hc.moe_layers))


def mla_part(hc: HfConfig) -> MlaConfig:
    """The MLA layers' description of a Kimi Linear model (the model registry's MLA part of this family)."""
    return hybrid_config(hc).mla


def _reject_unsupported(hc: HfConfig) -> None:
    check_runnable(hc)
    if hc.quantization:
        raise ModelLoadError(f"{hc.source}: quantized checkpoints are not supported by the bundled runtime")
    if hc.mla_use_nope is False:
        raise ModelLoadError(f"{hc.source}: mla_use_nope=false (rotary MLA in kimi_linear) is not supported; "
                             "the bundled runtime runs NoPE MLA as transformers does")
    if hc.hidden_act != "silu":
        raise ModelLoadError(f"{hc.source}: hidden_act {hc.hidden_act!r} is not supported; supported: silu")
    if hc.scoring_func not in ("sigmoid", "softmax"):
        raise ModelLoadError(f"{hc.source}: moe_router_activation_func {hc.scoring_func!r} is not supported; "
                             "supported: sigmoid, softmax")
