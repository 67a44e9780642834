"""Which layers of a config.json are MLA and which KDA, which are MoE, and the KDA shape (torch-free).

Layer kinds: `layer_types` ("full_attention" / "linear_attention"), else
`linear_attn_config.full_attn_layers` (+ optional `kda_layers`, else the rest), 1-indexed as in
checkpoints; neither: None (the planner reads all layers as MLA; the runtime refuses a kimi_linear
config that names no kinds, since transformers would invent a pattern the plan never saw).
MoE layers: `mlp_layer_types` ("dense" / "sparse"), else i >= first_k_dense_replace and
i % moe_layer_freq == 0; none without routed experts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dcpctl.plan.errors import ConfigError

MLA, KDA = "mla", "kda"
MLA_NAMES, KDA_NAMES = ("full_attention", "mla", "attention"), ("linear_attention", "kda")


@dataclass(frozen=True)
class KdaShape:
    """Kimi Delta Attention (linear) layers: request-indexed state, never striped by DCP."""

    num_heads: int
    head_dim: int      # q, k and v head size alike
    conv_kernel: int   # short causal convolution width

    def state_bytes_per_layer(self) -> int:
        recurrent = self.num_heads * self.head_dim * self.head_dim * 4  # fp32 [H, Dk, Dv]
        conv = 3 * self.num_heads * self.head_dim * (self.conv_kernel - 1) * 2  # q, k, v short convs, bf16
        return recurrent + conv


def _err(source: str, msg: str) -> ConfigError:
    return ConfigError(f"{source}: {msg}")


def layer_kinds(lm: dict[str, Any], n: int, source: str) -> tuple[tuple[str, ...] | None, KdaShape | None]:
    """(MLA or KDA per layer, the KDA shape its keys give) or (None, None) when the file names no kinds."""
    types, lin = lm.get("layer_types"), lm.get("linear_attn_config") or {}
    if types:
        if len(types) != n:
            raise _err(source, f"len(layer_types) ({len(types)}) != num_hidden_layers ({n})")
        bad = sorted({t for t in types if t not in MLA_NAMES + KDA_NAMES})
        if bad:
            raise _err(source, f"layer_types {bad} unknown; valid: {list(MLA_NAMES + KDA_NAMES)}")
        kinds = tuple(MLA if t in MLA_NAMES else KDA for t in types)
    elif lin.get("full_attn_layers"):
        kinds = _from_lists(lin, n, source)
    else:
        return None, None
    kda = KdaShape(int(_pick(lin, "num_heads", lm, "linear_num_heads", 32)),
                   int(_pick(lin, "head_dim", lm, "linear_head_dim", 128)),
                   int(_pick(lin, "short_conv_kernel_size", lm, "linear_conv_kernel_dim", 4)))
    return kinds, kda


def _pick(lin: dict[str, Any], key: str, lm: dict[str, Any], flat: str, default: int) -> Any:
    return next((v for v in (lin.get(key), lm.get(flat)) if v is not None), default)


def _from_lists(lin: dict[str, Any], n: int, source: str) -> tuple[str, ...]:
    full = [int(i) for i in lin["full_attn_layers"]]
    kda = [int(i) for i in lin.get("kda_layers") or [i for i in range(1, n + 1) if i not in full]]
    if sorted(full + kda) != list(range(1, n + 1)):
        raise _err(source, f"linear_attn_config full_attn_layers {full} and kda_layers {kda} must cover "
                           f"layers 1..{n} (1-indexed) exactly once")
    return tuple(MLA if i + 1 in full else KDA for i in range(n))


def moe_layers(lm: dict[str, Any], n: int, experts: int, first: int, freq: int,
               source: str) -> tuple[int, ...]:
    """0-based indices of the MoE layers."""
    types = lm.get("mlp_layer_types")
    if types:
        if len(types) != n or any(t not in ("dense", "sparse") for t in types):
            raise _err(source, f"mlp_layer_types must list 'dense' or 'sparse' for each of the {n} layers, "
                               f"got {types}")
        return tuple(i for i, t in enumerate(types) if t == "sparse") if experts else ()
    if freq < 1:
        raise _err(source, f"moe_layer_freq ({freq}) must be at least 1")
    return tuple(i for i in range(n) if experts and i >= first and i % freq == 0)
