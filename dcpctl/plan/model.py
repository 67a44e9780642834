"""Model spec from a Hugging Face config.json (or a preset holding the same keys).

Reads DeepseekV2/V3, Kimi K2 (`kimi_k2`), KimiLinear (`kimi_linear`: `layer_types` or
`linear_attn_config.full_attn_layers`, 1-indexed) and wrappers nesting the LM under `text_config`.
Note: in these configs `head_dim` is the rope size, not the head size.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dcpctl.plan.errors import UserError

SUPPORTED_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_linear", "kimi_k3")
MAX_LAYERS = 4096  # guards against a typo building a million-entry layer list
MAX_DIM = 2**31 - 1  # any model size or count past int32 is a typo, and would overflow the memory math
# bytes per element of every dtype name dcpctl meets (model dtypes, KV cache dtypes, torch names): one table
DTYPE_BYTES = {"float64": 8, "float32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "float8_e4m3fn": 1,
               "fp8_e4m3": 1, "fp8_e5m2": 1}


@dataclass(frozen=True)
class KdaSpec:
    """Kimi Delta Attention (linear) layers: request-indexed state, never striped by DCP."""

    num_heads: int
    head_dim: int
    conv_kernel: int

    def state_bytes_per_layer(self) -> int:
        recurrent = self.num_heads * self.head_dim * self.head_dim * 4  # fp32 [H, Dk, Dv]
        conv = 3 * self.num_heads * self.head_dim * (self.conv_kernel - 1) * 2  # q, k, v short convs, bf16
        return recurrent + conv


@dataclass(frozen=True)
class ModelSpec:
    name: str
    architectures: tuple[str, ...]
    model_type: str
    hidden_size: int
    num_layers: int
    num_heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    vocab_size: int
    intermediate_size: int
    moe_intermediate_size: int
    n_routed_experts: int
    num_experts_per_tok: int
    n_shared_experts: int
    first_k_dense_replace: int
    max_position_embeddings: int
    dtype: str
    quantization: str | None
    mla_layers: tuple[int, ...]  # 0-based indices of MLA (full attention) layers
    kda: KdaSpec | None = None
    uses_rope: bool = True
    weight_block: tuple[int, int] | None = None  # block-FP8 checkpoints: quantization_config.weight_block_size
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def kv_row_elems(self) -> int:
        """One latent KV row: kv_lora_rank + qk_rope_head_dim (576 for DeepSeek-V3)."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def kda_layers(self) -> tuple[int, ...]:
        return tuple(i for i in range(self.num_layers) if i not in set(self.mla_layers)) if self.kda else ()

    @property
    def is_hybrid(self) -> bool:
        return self.kda is not None

    def summary(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k not in ("extra", "kda", "mla_layers")}
        d["mla_layers"] = [i + 1 for i in self.mla_layers]  # 1-based, as model cards count
        d["num_mla_layers"] = len(self.mla_layers)
        d["kda"] = dict(self.kda.__dict__) if self.kda else None
        d["kv_row_elems"] = self.kv_row_elems
        return d


def load_config_json(path: Path) -> dict[str, Any]:
    """Read a config.json; a missing or malformed file is a UserError naming it (and the line)."""
    from dcpctl.plan.yamlio import read_user_text
    if path.is_dir():
        path = path / "config.json"
    text = read_user_text(path, "JSON")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{path} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} must hold a JSON object, not {type(data).__name__}")
    return data


def _get(cfg: dict[str, Any], *names: str, default: Any = None) -> Any:
    for n in names:
        if cfg.get(n) is not None:
            return cfg[n]
    return default


def _layer_split(cfg: dict[str, Any], num_layers: int) -> tuple[tuple[int, ...], KdaSpec | None]:
    lin = cfg.get("linear_attn_config") or {}
    types = cfg.get("layer_types")
    if types:
        mla = tuple(i for i, t in enumerate(types) if t in ("full_attention", "mla", "attention"))
    elif lin.get("full_attn_layers"):
        mla = tuple(int(i) - 1 for i in lin["full_attn_layers"])  # 1-indexed in checkpoints
    else:
        return tuple(range(num_layers)), None
    if len(mla) == num_layers:
        return mla, None
    kda = KdaSpec(int(_get(lin, "num_heads", default=cfg.get("linear_num_heads", 32))),
                  int(_get(lin, "head_dim", default=cfg.get("linear_head_dim", 128))),
                  int(_get(lin, "short_conv_kernel_size", default=cfg.get("linear_conv_kernel_dim", 4))))
    return tuple(sorted(mla)), kda


def _quantization(cfg: dict[str, Any], outer: dict[str, Any]) -> str | None:
    q = cfg.get("quantization_config") or outer.get("quantization_config")
    if not q:
        return None
    return str(q.get("quant_method") or q.get("fmt") or "quantized") if isinstance(q, dict) else str(q)


def _weight_block(cfg: dict[str, Any], outer: dict[str, Any]) -> tuple[int, int] | None:
    q = cfg.get("quantization_config") or outer.get("quantization_config")
    block = q.get("weight_block_size") if isinstance(q, dict) and q.get("quant_method") == "fp8" else None
    if isinstance(block, (list, tuple)) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block):
        return int(block[0]), int(block[1])
    return None


def spec_from_config(cfg: dict[str, Any], name: str = "model", source: str = "config.json") -> ModelSpec:
    """Build a ModelSpec; an unsupported model or a missing MLA key is a UserError."""
    outer = cfg
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg["text_config"]}
    archs = outer.get("architectures") or cfg.get("architectures") or ()
    if not isinstance(archs, (list, tuple)) or not all(isinstance(a, str) for a in archs):
        raise UserError(f"{source}: architectures must be a list of class names, got {archs!r}")
    archs = tuple(archs)
    mtype = str(cfg.get("model_type") or outer.get("model_type") or "")
    if mtype not in SUPPORTED_TYPES and not any("Kimi" in a or "Deepseek" in a for a in archs):
        raise UserError(f"{source}: model_type {mtype!r} is not an MLA model dcpctl supports; "
                        f"supported: {', '.join(SUPPORTED_TYPES)}")
    if "kv_lora_rank" not in cfg:
        raise UserError(f"{source}: no kv_lora_rank: not an MLA model (model_type {mtype!r})")
    try:
        spec = _build_spec(cfg, outer, archs, mtype, name)
    except KeyError as e:
        raise UserError(f"{source}: missing model field {e.args[0]!r}") from None
    except (TypeError, ValueError, AttributeError, OverflowError) as e:
        raise UserError(f"{source}: a model field has the wrong type or value ({e})") from None
    bad = [k for k in ("hidden_size", "num_layers", "num_heads", "kv_lora_rank") if getattr(spec, k) < 1]
    if bad:
        raise UserError(f"{source}: model field(s) {bad} must be positive integers")
    sizes = {k: v for k, v in spec.__dict__.items() if isinstance(v, int) and not isinstance(v, bool)}
    bad = [k for k, v in sizes.items() if not 0 <= v <= MAX_DIM]
    if bad:
        raise UserError(f"{source}: model field(s) {bad} must be integers from 0 to {MAX_DIM:,}")
    if not spec.mla_layers or not all(0 <= i < spec.num_layers for i in spec.mla_layers):
        raise UserError(f"{source}: the MLA (full attention) layers {[i + 1 for i in spec.mla_layers]} from "
                        f"layer_types / linear_attn_config must be 1 to {spec.num_layers} layers of num_hidden_layers")
    return spec


def _build_spec(cfg: dict[str, Any], outer: dict[str, Any], archs: tuple[str, ...], mtype: str, name: str) -> ModelSpec:
    layers = int(cfg["num_hidden_layers"])
    if not 1 <= layers <= MAX_LAYERS:
        raise ValueError(f"num_hidden_layers must be 1 to {MAX_LAYERS}, got {layers}")
    mla, kda = _layer_split(cfg, layers)
    dtype = str(_get(cfg, "torch_dtype", "dtype", default=_get(outer, "torch_dtype", "dtype", default="bfloat16")))
    return ModelSpec(
        name=name, architectures=archs, model_type=mtype,
        hidden_size=int(cfg["hidden_size"]), num_layers=layers, num_heads=int(cfg["num_attention_heads"]),
        q_lora_rank=int(cfg["q_lora_rank"]) if cfg.get("q_lora_rank") else None,
        kv_lora_rank=int(cfg["kv_lora_rank"]), qk_nope_head_dim=int(cfg.get("qk_nope_head_dim", 128)),
        qk_rope_head_dim=int(cfg.get("qk_rope_head_dim", 64)), v_head_dim=int(cfg.get("v_head_dim", 128)),
        vocab_size=int(cfg.get("vocab_size", 0)), intermediate_size=int(cfg.get("intermediate_size", 0)),
        moe_intermediate_size=int(cfg.get("moe_intermediate_size", 0)),
        n_routed_experts=int(_get(cfg, "n_routed_experts", "num_experts", "num_local_experts", default=0)),
        num_experts_per_tok=int(_get(cfg, "num_experts_per_tok", "num_experts_per_token", default=0)),
        n_shared_experts=int(_get(cfg, "n_shared_experts", "num_shared_experts", default=0)),
        first_k_dense_replace=int(cfg.get("first_k_dense_replace", 0)),
        max_position_embeddings=int(_get(cfg, "max_position_embeddings", "model_max_length", default=4096)),
        dtype=dtype, quantization=_quantization(cfg, outer), mla_layers=mla, kda=kda,
        uses_rope=not (kda is not None or bool(cfg.get("mla_use_nope"))), weight_block=_weight_block(cfg, outer),
        extra={"config": outer},
    )


def spec_from_path(path: str | Path) -> ModelSpec:
    p = Path(path)
    cfg = load_config_json(p)
    src = str(p / "config.json" if p.is_dir() else p)
    return spec_from_config(cfg, name=p.name if p.is_dir() else p.parent.name, source=src)
