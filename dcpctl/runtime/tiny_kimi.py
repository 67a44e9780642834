"""A tiny Kimi Linear (KDA + NoPE MLA hybrid) model: a seeded random checkpoint in Moonshot's layout.

    write_tiny_kimi_model(dir, seed=0, **overrides) -> Path     config.json, model.safetensors, tokenizer
    tiny_kimi_config(**overrides) -> dict                        the config.json contents
    tensor_shapes(hc: HybridConfig) -> {name: shape}             every checkpoint tensor

config.json uses Moonshot's keys (model_type kimi_linear, linear_attn_config with 1-indexed
full_attn_layers / kda_layers, num_experts, num_experts_per_token, moe_renormalize, ...), which both
the runtime loader and the planner's model spec read. Layers: KDA, MLA, KDA, MLA; layer 0 dense,
the rest MoE (grouped sigmoid routing with correction bias, one shared expert). Weights are fp32 with
HF names (KDA q/k/v_conv1d, A_log, dt_bias; experts w1/w3/w2 under block_sparse_moe). Same seed and
overrides -> identical bytes.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from dcpctl.runtime.models.kimi_config import HybridConfig, parse_kimi_linear
from dcpctl.runtime.models.kimi_linear import checkpoint_wants
from dcpctl.runtime.models.shards import plan_shards
from dcpctl.runtime.parallel import ParallelState
from dcpctl.runtime.tokenizer import ByteTokenizer

_VOCAB = 264  # 256 bytes + 4 specials, padded to a multiple of 8


def tiny_kimi_config(**overrides: Any) -> dict[str, Any]:
    tok = ByteTokenizer()
    cfg = {
        "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "vocab_size": _VOCAB,
        "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 4,
        "num_attention_heads": 8, "num_key_value_heads": 8, "q_lora_rank": None, "kv_lora_rank": 32,
        "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "mla_use_nope": True,
        "num_experts": 8, "num_experts_per_token": 2, "num_shared_experts": 1, "num_expert_group": 2,
        "topk_group": 1, "moe_renormalize": True, "moe_router_activation_func": "sigmoid",
        "routed_scaling_factor": 2.446, "first_k_dense_replace": 1, "moe_layer_freq": 1, "hidden_act": "silu",
        "rms_norm_eps": 1e-5, "model_max_length": 4096, "tie_word_embeddings": False,
        "linear_attn_config": {"full_attn_layers": [2, 4], "kda_layers": [1, 3], "num_heads": 8, "head_dim": 8,
                               "short_conv_kernel_size": 4},
        "bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id, "torch_dtype": "float32",
    }
    cfg.update(overrides)
    return cfg


def tensor_shapes(hc: HybridConfig) -> dict[str, tuple[int, ...]]:
    """Checkpoint name -> full shape (dense MLPs stored under 'mlp.', MoE under 'block_sparse_moe.')."""
    ps = ParallelState.single()
    dense = {f"model.layers.{i}" for i in range(hc.mla.num_layers) if i not in hc.moe_layers}
    wants, _ = checkpoint_wants(hc, ps, plan_shards(hc.mla, ps, False), "model.", "lm_head.weight",
                                torch.float32, dense)
    return {w.name: w.shape for w in wants}


def _init(name: str, shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    # norms near 1, small correction bias, decay rates exp(A_log) near 1, conv taps 1/sqrt(K),
    # embeddings unit scale, matrices 1/sqrt(fan_in)
    x = torch.randn(shape, generator=g, dtype=torch.float32)
    if name.endswith("e_score_correction_bias"):
        return 0.1 * x
    if name.endswith("A_log"):
        return 0.5 * x
    if name.endswith("conv1d.weight"):
        return x * shape[-1] ** -0.5
    if len(shape) == 1:
        return 1.0 + 0.1 * x
    return x if "embed_tokens" in name else x * shape[1] ** -0.5


def write_tiny_kimi_model(directory: str | Path, seed: int = 0, **overrides: Any) -> Path:
    """Write config.json, model.safetensors and the byte tokenizer into `directory`."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    cfg = tiny_kimi_config(**overrides)
    g = torch.Generator().manual_seed(seed)
    shapes = tensor_shapes(parse_kimi_linear(cfg))
    tensors = {n: _init(n, s, g) for n, s in sorted(shapes.items())}
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    (d / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
    (d / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"]}, indent=2))
    ByteTokenizer().save(d)
    return d
