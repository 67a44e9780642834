"""A built-in tiny DeepSeek-V3-shaped model: a seeded random checkpoint in plain HF layout.

    ensure_tiny_model(dir: str | Path | None = None) -> Path
        the cached checkpoint directory (created once, atomically: written to a temporary
        sibling and renamed). Default location: $DCPCTL_CACHE/tiny-deepseek, else
        ~/.cache/dcpctl/tiny-deepseek.
    write_tiny_model(dir, seed=0, **overrides) -> Path
        write one now (tests use overrides such as q_lora_rank=None or num_hidden_layers=2).
    write_random_checkpoint(dir, cfg, shapes, seed, zero_specials) -> Path
        the seeded writer shared with tiny_kimi (config, weights, byte tokenizer).
    tiny_config(**overrides) -> dict       the config.json contents

The directory holds config.json (architectures ["DeepseekV3ForCausalLM"], model_type deepseek_v3,
YaRN rope, MoE with noaux_tc routing), model.safetensors with HF parameter names (fp32), and the
byte tokenizer (see dcpctl.runtime.tokenizer). Same seed and overrides -> identical bytes.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from dcpctl import knobs
from dcpctl.runtime.models.config import MlaConfig, parse_config
from dcpctl.runtime.tokenizer import ByteTokenizer

TINY_VERSION = "2"
VOCAB = 264  # 256 bytes + 4 specials, padded to a multiple of 8


def tiny_config(**overrides: Any) -> dict[str, Any]:
    tok = ByteTokenizer()
    cfg = {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": VOCAB,
        "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 4,
        "num_attention_heads": 8, "num_key_value_heads": 8, "q_lora_rank": 32, "kv_lora_rank": 32,
        "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "n_routed_experts": 8,
        "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1, "n_shared_experts": 1,
        "first_k_dense_replace": 1, "moe_layer_freq": 1, "norm_topk_prob": True,
        "routed_scaling_factor": 2.5, "topk_method": "noaux_tc", "scoring_func": "sigmoid",
        "hidden_act": "silu", "rms_norm_eps": 1e-6, "max_position_embeddings": 2048,
        "rope_interleave": True, "tie_word_embeddings": False, "attention_bias": False,
        "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                            "original_max_position_embeddings": 512, "beta_fast": 32, "beta_slow": 1,
                            "mscale": 1.0, "mscale_all_dim": 1.0},
        "bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id, "torch_dtype": "float32",
        "num_nextn_predict_layers": 0,
    }
    cfg.update(overrides)
    return cfg


def tensor_shapes(c: MlaConfig) -> dict[str, tuple[int, ...]]:
    """HF parameter name -> shape for a DeepSeek-V2/V3 config."""
    D, H, qk, L = c.hidden_size, c.num_heads, c.qk_head_dim, c.kv_lora_rank
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (c.vocab_size, D),
                                          "model.norm.weight": (D,), "lm_head.weight": (c.vocab_size, D)}
    for i in range(c.num_layers):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (D,), p + "post_attention_layernorm.weight": (D,)})
        a = p + "self_attn."
        shapes.update({a + "kv_a_proj_with_mqa.weight": (L + c.qk_rope_head_dim, D),
                       a + "kv_a_layernorm.weight": (L,),
                       a + "kv_b_proj.weight": (H * (c.qk_nope_head_dim + c.v_head_dim), L),
                       a + "o_proj.weight": (D, H * c.v_head_dim)})
        if c.q_lora_rank is None:
            shapes[a + "q_proj.weight"] = (H * qk, D)
        else:
            Q = c.q_lora_rank
            shapes.update({a + "q_a_proj.weight": (Q, D), a + "q_a_layernorm.weight": (Q,),
                           a + "q_b_proj.weight": (H * qk, Q)})
        shapes.update(_mlp_shapes(c, i, p + "mlp."))
    return shapes


def _swiglu(p: str, D: int, inter: int) -> dict[str, tuple[int, ...]]:
    return {p + "gate_proj.weight": (inter, D), p + "up_proj.weight": (inter, D),
            p + "down_proj.weight": (D, inter)}


def _mlp_shapes(c: MlaConfig, i: int, p: str) -> dict[str, tuple[int, ...]]:
    if not c.is_moe_layer(i):
        return _swiglu(p, c.hidden_size, c.intermediate_size)
    out: dict[str, tuple[int, ...]] = {p + "gate.weight": (c.n_routed_experts, c.hidden_size)}
    if c.topk_method == "noaux_tc":
        out[p + "gate.e_score_correction_bias"] = (c.n_routed_experts,)
    for e in range(c.n_routed_experts):
        out.update(_swiglu(f"{p}experts.{e}.", c.hidden_size, c.moe_intermediate_size))
    if c.n_shared_experts:
        out.update(_swiglu(p + "shared_experts.", c.hidden_size,
                           c.moe_intermediate_size * c.n_shared_experts))
    return out


def init_tensor(name: str, shape: tuple[int, ...], g: torch.Generator, zero_specials: bool) -> torch.Tensor:
    # norms near 1, correction bias small, KDA decay rates exp(A_log) near 1, KDA conv taps
    # 1/sqrt(K), embeddings unit scale, matrices 1/sqrt(fan_in)
    x = torch.randn(shape, generator=g, dtype=torch.float32)
    if name.endswith("e_score_correction_bias"):
        return 0.1 * x
    if name.endswith("A_log"):
        return 0.5 * x
    if name.endswith("conv1d.weight"):
        return x * shape[-1] ** -0.5
    if len(shape) == 1:
        return 1.0 + 0.1 * x
    if zero_specials and name == "lm_head.weight":  # specials (BOS/EOS/PAD/UNK, ids >= 256) get zero
        x[256:] = 0.0                                 # logits: a random model then never ends at once
    return x if "embed_tokens" in name else x * shape[1] ** -0.5


def write_random_checkpoint(directory: str | Path, cfg: dict[str, Any], shapes: dict[str, tuple[int, ...]],
                            seed: int, zero_specials: bool) -> Path:
    """config.json, generation_config.json, seeded fp32 model.safetensors and the byte tokenizer."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    tensors = {n: init_tensor(n, s, g, zero_specials) for n, s in sorted(shapes.items())}
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    (d / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
    (d / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"]}, indent=2))
    ByteTokenizer().save(d)
    return d


def write_tiny_model(directory: str | Path, seed: int = 0, **overrides: Any) -> Path:
    """Write config.json, model.safetensors and the byte tokenizer into `directory`."""
    cfg = tiny_config(**overrides)
    d = write_random_checkpoint(directory, cfg, tensor_shapes(parse_config(cfg)), seed, zero_specials=True)
    (d / "DCPCTL_TINY_VERSION").write_text(TINY_VERSION)
    return d


def _fresh(target: Path) -> bool:
    marker = target / "DCPCTL_TINY_VERSION"
    return marker.exists() and marker.read_text() == TINY_VERSION


def default_tiny_dir() -> Path:
    root = knobs.get("DCPCTL_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "dcpctl") / "tiny-deepseek"


def ensure_tiny_model(dir: str | Path | None = None) -> Path:  # noqa: A002 - public name
    """The tiny checkpoint directory, written once (atomically) if absent or stale."""
    target = Path(dir) if dir is not None else default_tiny_dir()
    if _fresh(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-", dir=target.parent))
    write_tiny_model(tmp)
    if _fresh(target):  # another process (say, another rank) finished first
        shutil.rmtree(tmp, ignore_errors=True)
        return target
    if target.exists():  # stale version or a partial directory from elsewhere
        shutil.rmtree(target, ignore_errors=True)
    try:
        os.rename(tmp, target)
    except OSError:  # another process won the race; its copy is identical
        shutil.rmtree(tmp, ignore_errors=True)
    return target
