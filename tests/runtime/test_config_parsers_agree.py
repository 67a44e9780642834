"""config.json is read twice: torch-free by the planner (plan/model.py ModelSpec) and by the runtime
(runtime/models/config.py MlaConfig, kimi_config.py for Kimi Linear hybrids).  Every model preset and
the tiny model's variants must give both the same shapes, so a plan's memory and the runtime's
allocations cannot drift apart."""
from pathlib import Path

import pytest
import yaml

from dcpctl.plan.model import spec_from_config
from dcpctl.runtime.models.config import ModelLoadError, _language_model, parse_config
from dcpctl.runtime.models.kimi_config import is_kimi_linear, parse_kimi_linear
from dcpctl.runtime.tiny import tiny_config

PRESETS = Path(__file__).resolve().parents[2] / "presets" / "models"
SHARED = [("hidden_size", "hidden_size"), ("num_layers", "num_layers"), ("num_heads", "num_heads"),
          ("q_lora_rank", "q_lora_rank"), ("kv_lora_rank", "kv_lora_rank"), ("qk_nope_head_dim", "qk_nope_head_dim"),
          ("qk_rope_head_dim", "qk_rope_head_dim"), ("v_head_dim", "v_head_dim"), ("vocab_size", "vocab_size"),
          ("intermediate_size", "intermediate_size"), ("moe_intermediate_size", "moe_intermediate_size"),
          ("n_routed_experts", "n_routed_experts"), ("num_experts_per_tok", "top_k"),
          ("n_shared_experts", "n_shared_experts"), ("kv_row_elems", "latent_dim")]


def configs():
    out = {p.stem: yaml.safe_load(p.read_text())["config"] for p in sorted(PRESETS.glob("*.yaml"))}
    out["tiny-no-q-lora"] = tiny_config(q_lora_rank=None)
    out["tiny-dense"] = tiny_config(n_routed_experts=0, first_k_dense_replace=0)
    return out


@pytest.mark.parametrize("name,cfg", list(configs().items()))
def test_planner_and_runtime_read_the_same_shapes(name, cfg):
    spec = spec_from_config(cfg, name)
    if "vocab_size" not in cfg and "vocab_size" not in cfg.get("text_config", {}):
        pytest.skip(f"{name}: the preset carries only what the planner needs (no vocab_size); the runtime needs the real file")
    try:
        cfg = _language_model(cfg, Path(f"{name}.yaml"))    # unwrap text_config as the runtime does
    except ModelLoadError as e:
        pytest.skip(f"{name}: the runtime does not run this architecture ({e})")
    if is_kimi_linear(cfg):
        hyb = parse_kimi_linear(cfg)
        mla = hyb.mla
        assert hyb.mla_layers == spec.mla_layers, name
        assert hyb.kda_layers == spec.kda_layers, name
    else:
        mla = parse_config(cfg)
    diff = {a: (getattr(spec, a), getattr(mla, b)) for a, b in SHARED if getattr(spec, a) != getattr(mla, b)}
    assert not diff, f"{name}: planner vs runtime {diff}"
