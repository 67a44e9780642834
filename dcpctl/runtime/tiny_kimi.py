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

from pathlib import Path
from typing import Any

import torch

from dcpctl.runtime.models.kimi_config import HybridConfig, parse_kimi_linear
from dcpctl.runtime.models.kimi_linear import checkpoint_wants
from dcpctl.runtime.models.shards import plan_shards
from dcpctl.runtime.parallel import ParallelState
from dcpctl.runtime.tiny import VOCAB, write_random_checkpoint
from dcpctl.runtime.tokenizer import ByteTokenizer


def tiny_kimi_config(**overrides: Any) -> dict[str, Any]:
    tok = ByteTokenizer()
    cfg = {
        "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "vocab_size": VOCAB,
        "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 4,
        "num_attention_heads": 8, "num_key_value_heads": 8, "q_lora_rank": None, "kv_lora_rank": 32,
        "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "mla_use_nope": True,
        "num_experts": 8, "num_experts_per_token": 2, "num_shared_experts": 1, "num_expert_group": 2,
        "topk_group": 1, "moe_renormalize": True, "moe_router_activation_func": "sigmoid",
        "routed_scaling_factor": 2.446, "first_k_dense_replace": 1, "moe_layer_freq": 1, "hidden_act": "silu",
        "rms_norm_eps": 1e-5, "model_max_length": 4096, "tie_word_embeddings": False,
        "linear_attn_config": {"full_attn_layers": [2, 4], "kda_layers": [1, 3], "num_heads": 8,
                               "head_dim": 8, "short_conv_kernel_size": 4},
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


def write_tiny_kimi_model(directory: str | Path, seed: int = 0, **overrides: Any) -> Path:
    """Write config.json, model.safetensors and the byte tokenizer into `directory`."""
    cfg = tiny_kimi_config(**overrides)
    return write_random_checkpoint(directory, cfg, tensor_shapes(parse_kimi_linear(cfg)), seed,
                                   zero_specials=False)
