"""Hugging Face config.json -> HfConfig: the one parse the planner and the runtime both read (torch-free).

    read_hf_config(path) -> HfConfig        opens config.json (and generation_config.json for EOS)
    parse_hf_config(cfg, source) -> HfConfig   a dict already in memory (a preset, a test)

Reads the families of plan/model_registry.py: DeepseekV2/V3, Kimi K2 (`kimi_k2`), KimiLinear
(`kimi_linear`: `layer_types` or `linear_attn_config.full_attn_layers` (+ `kda_layers`), 1-indexed) and
wrappers nesting the language model under `text_config`. A key absent from the file takes transformers'
default for the model's family, aliases included (plan/hf_defaults.py); only the four keys that say which
model this is (hidden_size, num_hidden_layers, num_attention_heads, kv_lora_rank) must be present. A null
value counts as absent, except q_lora_rank (null: no query LoRA). In these configs `head_dim` is the rope
size, not the head size. The planner projects this (plan/model.py ModelSpec); the runtime builds its
model description from it (runtime/models/config.py) and checks what it can run there.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from dcpctl.plan.errors import ConfigError
from dcpctl.plan.hf_defaults import DEFAULTS, KIMI_LINEAR, V2, first, value
from dcpctl.plan.hf_layers import KDA, MLA, KdaShape, layer_kinds, moe_layers
from dcpctl.plan.hf_rope import RopeSpec, read_rope
from dcpctl.plan.model_registry import MODEL_TYPES, family_of

MAX_LAYERS = 4096  # guards against a typo building a million-entry layer list
MAX_DIM = 2**31 - 1  # any model size or count past int32 is a typo, and would overflow the memory math


@dataclass(frozen=True)
class MlaShape:
    """The sizes every reader of a model shares: the parse, the planner's ModelSpec, the runtime's
    MlaConfig."""

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
    n_shared_experts: int

    @property
    def kv_row_elems(self) -> int:
        """One latent KV row: kv_lora_rank + qk_rope_head_dim (576 for DeepSeek-V3)."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def shape(self) -> dict[str, Any]:
        """These fields as keyword arguments, to build another reader's description."""
        return {f.name: getattr(self, f.name) for f in fields(MlaShape)}


@dataclass(frozen=True)
class HfConfig(MlaShape):
    """One model as its config.json describes it (the language model of a wrapper)."""

    source: str
    family: str                      # the transformers config class whose defaults it took
    architectures: tuple[str, ...]
    model_type: str
    num_experts_per_tok: int | None
    n_group: int | None
    topk_group: int | None
    first_k_dense_replace: int
    moe_layer_freq: int
    norm_topk_prob: bool
    routed_scaling_factor: float
    topk_method: str                 # greedy | group_limited_greedy | noaux_tc
    scoring_func: str                # softmax | sigmoid (Kimi Linear: moe_router_activation_func)
    rms_norm_eps: float
    tie_word_embeddings: bool
    max_position_embeddings: int
    rope: RopeSpec
    dtype: str
    hidden_act: str
    attention_bias: bool
    mlp_bias: bool
    mla_use_nope: bool | None        # Kimi Linear: None when the file does not say
    layer_kinds: tuple[str, ...] | None   # MLA / KDA per layer; None: the file names none (all MLA)
    moe_layers: tuple[int, ...]
    kda: KdaShape | None
    quantization: dict[str, Any] | None   # quantization_config as written (the runtime's quant.py parses it)
    eos_token_ids: tuple[int, ...]
    raw: dict[str, Any] = field(compare=False, repr=False)  # the whole file

    @property
    def mla_layers(self) -> tuple[int, ...]:
        return tuple(i for i, k in enumerate(self.layer_kinds or (MLA,) * self.num_layers) if k == MLA)

    @property
    def kda_layers(self) -> tuple[int, ...]:
        return tuple(i for i in range(self.num_layers) if i not in set(self.mla_layers))

    def limits(self) -> tuple[int, int]:
        """(vocab_size, max_position_embeddings): what the server checks requests against."""
        return self.vocab_size, self.max_position_embeddings


def load_config_json(path: Path) -> dict[str, Any]:
    """Read a config.json; a missing or malformed file is a UserError naming it (and the line)."""
    from dcpctl.plan.yamlio import read_user_text
    if path.is_dir():
        path = path / "config.json"
    text = read_user_text(path, "JSON")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object, not {type(data).__name__}")
    return data


def read_hf_config(path: str | Path) -> HfConfig:
    """Parse `path/config.json` (or a config.json path); EOS ids from generation_config.json when it has
    them."""
    p = Path(path)
    file = p / "config.json" if p.is_dir() else p
    cfg = load_config_json(file)
    gen = file.parent / "generation_config.json"
    eos = _eos_ids(load_config_json(gen).get("eos_token_id"), str(gen)) if gen.exists() else ()
    hc = parse_hf_config(cfg, str(file))
    return replace(hc, eos_token_ids=eos) if eos else hc


def eos_token_ids(path: str | Path) -> tuple[int, ...]:
    """The EOS ids of checkpoint directory `path` (read_hf_config's); none where it holds no config.json
    (a model built in memory, as tests pass one)."""
    return read_hf_config(path).eos_token_ids if (Path(path) / "config.json").exists() else ()


def parse_hf_config(cfg: dict[str, Any], source: str = "config.json") -> HfConfig:
    """Build an HfConfig; a model dcpctl does not know or a malformed key is a ConfigError naming `source`."""
    outer, lm = cfg, cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg
    archs = outer.get("architectures") or lm.get("architectures") or ()
    if not isinstance(archs, (list, tuple)) or not all(isinstance(a, str) for a in archs):
        raise ConfigError(f"{source}: architectures must be a list of class names, got {archs!r}")
    archs, mtype = tuple(archs), str(lm.get("model_type") or outer.get("model_type") or "")
    family = family_of(mtype, archs)  # the model registry (plan/model_registry.py)
    if family is None:
        raise ConfigError(f"{source}: model_type {mtype!r} (architectures {list(archs)}) is not an MLA model "
                          f"dcpctl supports; supported model types: {', '.join(MODEL_TYPES)}")
    try:
        hc = _build(lm, outer, archs, mtype, source, family.hf_defaults)
    except KeyError as e:
        raise ConfigError(f"{source}: required key {e.args[0]!r} is missing (model_type {mtype!r})") from None
    except (TypeError, ValueError, AttributeError, OverflowError) as e:
        raise ConfigError(f"{source}: a model field has the wrong type or value ({e})") from None
    _check(hc)
    return hc


def _build(lm: dict[str, Any], outer: dict[str, Any], archs: tuple[str, ...], mtype: str, source: str,
           fam: str) -> HfConfig:
    get = lambda name: value(lm, name, fam)  # noqa: E731
    layers = int(_need(lm, "num_hidden_layers"))
    if not 1 <= layers <= MAX_LAYERS:
        raise ValueError(f"num_hidden_layers must be 1 to {MAX_LAYERS}, got {layers}")
    kinds, kda = layer_kinds(lm, layers, source)
    experts = int(get("n_routed_experts") or 0)
    dense, freq = int(get("first_k_dense_replace")), int(lm.get("moe_layer_freq") or 1)
    q = "q_lora_rank"
    return HfConfig(
        source=source, family=fam, architectures=archs, model_type=mtype,
        hidden_size=int(_need(lm, "hidden_size")), num_layers=layers,
        num_heads=int(_need(lm, "num_attention_heads")),
        q_lora_rank=(int(lm[q] or 0) or None) if q in lm else DEFAULTS[q][fam],  # null or 0: no query LoRA
        kv_lora_rank=int(_need(lm, "kv_lora_rank")), qk_nope_head_dim=int(get("qk_nope_head_dim")),
        qk_rope_head_dim=int(get("qk_rope_head_dim")), v_head_dim=int(get("v_head_dim")),
        vocab_size=int(get("vocab_size")), intermediate_size=int(get("intermediate_size")),
        moe_intermediate_size=int(get("moe_intermediate_size")), n_routed_experts=experts,
        num_experts_per_tok=_int_or_none(get("num_experts_per_tok")),
        n_shared_experts=int(get("n_shared_experts")), n_group=_int_or_none(get("n_group")),
        topk_group=_int_or_none(get("topk_group")), first_k_dense_replace=dense, moe_layer_freq=freq,
        norm_topk_prob=bool(get("norm_topk_prob")), routed_scaling_factor=float(get("routed_scaling_factor")),
        rms_norm_eps=float(get("rms_norm_eps")),
        topk_method=str(lm.get("topk_method") or ("greedy" if fam == V2 else "noaux_tc")),
        scoring_func=str(lm.get("moe_router_activation_func" if fam == KIMI_LINEAR else "scoring_func") or
                         ("softmax" if fam == V2 else "sigmoid")),
        tie_word_embeddings=bool(get("tie_word_embeddings")),
        max_position_embeddings=int(get("max_position_embeddings")),
        rope=read_rope(lm, fam, KDA in (kinds or ()) or bool(lm.get("mla_use_nope"))),
        dtype=str(first(lm, "torch_dtype", "dtype") or first(outer, "torch_dtype", "dtype") or "bfloat16"),
        hidden_act=str(lm.get("hidden_act") or "silu"), attention_bias=bool(lm.get("attention_bias")),
        mlp_bias=bool(lm.get("mlp_bias")),
        mla_use_nope=None if lm.get("mla_use_nope") is None else bool(lm["mla_use_nope"]),
        layer_kinds=kinds, moe_layers=moe_layers(lm, layers, experts, dense, freq, source), kda=kda,
        quantization=lm.get("quantization_config") or outer.get("quantization_config") or None,
        eos_token_ids=_eos_ids(outer.get("eos_token_id", lm.get("eos_token_id")), source), raw=outer,
    )


def _need(cfg: dict[str, Any], key: str) -> Any:
    if cfg.get(key) is None:  # absent or null: one of the keys that say which model this is
        raise KeyError(key)
    return cfg[key]


def _int_or_none(v: Any) -> int | None:
    return None if v is None else int(v)


def _eos_ids(eos: Any, source: str) -> tuple[int, ...]:
    ids = eos if isinstance(eos, list) else [] if eos is None else [eos]
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise ConfigError(f"{source}: eos_token_id must be a token id or a list of them, got {eos!r}")
    return tuple(ids)


def _check(hc: HfConfig) -> None:
    src = hc.source
    bad = [k for k in ("hidden_size", "num_layers", "num_heads", "kv_lora_rank") if getattr(hc, k) < 1]
    if bad:
        raise ConfigError(f"{src}: model field(s) {bad} must be positive integers")
    sizes = {k: v for k, v in hc.__dict__.items() if isinstance(v, int) and not isinstance(v, bool)}
    bad = [k for k, v in sizes.items() if not 0 <= v <= MAX_DIM]
    if bad:
        raise ConfigError(f"{src}: model field(s) {bad} must be integers from 0 to {MAX_DIM:,}")
    if not hc.mla_layers:
        raise ConfigError(f"{src}: the MLA (full attention) layers [] from layer_types / linear_attn_config "
                          f"must be 1 to {hc.num_layers} layers of num_hidden_layers")
    if hc.kda is not None and hc.kda_layers and hc.kda.conv_kernel < 1:
        raise ConfigError(f"{src}: short_conv_kernel_size ({hc.kda.conv_kernel}) must be at least 1")
