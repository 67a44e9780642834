import json

import pytest

from dcpctl.plan import presets
from dcpctl.plan.errors import UserError
from dcpctl.plan.model import spec_from_config, spec_from_path


def cfg(name):
    return presets.get("models", name)["config"]


def test_design_table_facts():
    v3 = spec_from_config(cfg("deepseek-v3"))
    assert (len(v3.mla_layers), v3.hidden_size, v3.num_heads, v3.kv_row_elems) == (61, 7168, 128, 576)
    assert v3.quantization == "fp8" and v3.weight_block == (128, 128)
    k2 = spec_from_config(cfg("kimi-k2"))
    assert (k2.num_heads, k2.n_routed_experts, k2.model_type) == (64, 384, "kimi_k2")
    kl = spec_from_config(cfg("kimi-linear-48b-a3b"))
    assert [i + 1 for i in kl.mla_layers] == [4, 8, 12, 16, 20, 24, 27]
    assert len(kl.kda_layers) == 20 and kl.q_lora_rank is None and not kl.uses_rope
    k3 = spec_from_config(cfg("kimi-k3"))
    assert len(k3.mla_layers) == 24 and [i + 1 for i in k3.mla_layers[-3:]] == [88, 92, 93]
    assert (k3.num_layers, k3.num_heads, k3.n_routed_experts, k3.num_experts_per_tok) == (93, 96, 896, 16)
    assert k3.architectures == ("KimiK3ForConditionalGeneration",)


def test_layer_types_key():
    c = dict(cfg("kimi-linear-48b-a3b"))
    c.pop("linear_attn_config")
    c["layer_types"] = ["linear_attention"] * 3 + ["full_attention"]
    c["num_hidden_layers"] = 4
    assert spec_from_config(c).mla_layers == (3,)


def test_reads_config_json_dir(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(cfg("deepseek-v3")))
    s = spec_from_path(tmp_path)
    assert s.name == tmp_path.name and s.num_heads == 128


def test_bad_config_files(tmp_path):
    with pytest.raises(UserError, match=r"cannot read .*config.json"):
        spec_from_path(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "deepseek_v3",\n "x": }')
    with pytest.raises(UserError, match=r"config.json is not valid JSON \(line 2, column 7: Expecting value"):
        spec_from_path(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "llama", "architectures": ["LlamaForCausalLM"]}')
    with pytest.raises(UserError,
                       match=r"model_type 'llama' \(architectures \['LlamaForCausalLM'\]\) is not an MLA "
                             r"model dcpctl supports"):
        spec_from_path(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "deepseek_v3", "kv_lora_rank": 512, '
                                          '"num_hidden_layers": "many"}')
    with pytest.raises(UserError, match="wrong type"):
        spec_from_path(tmp_path)
