"""The model registry (plan/model_registry.py): one table read by the plan and the runtime; a family is one
line."""
from __future__ import annotations

import dataclasses
import json

import pytest

from dcpctl.plan import model_registry as M
from dcpctl.plan.errors import ConfigError
from dcpctl.plan.hf_config import parse_hf_config
from dcpctl.plan.hf_defaults import KIMI_LINEAR, V2, V3
from dcpctl.plan import presets

BASE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "kv_lora_rank": 32}


@pytest.mark.parametrize("mtype, archs, family, defaults", [
    ("deepseek_v3", ["DeepseekV3ForCausalLM"], "deepseek_v3", V3),
    ("kimi_k2", ["DeepseekV3ForCausalLM"], "kimi_k2", V3),            # model_type first: Kimi K2's remote
                                                                      # code
    ("deepseek_v3", ["DeepseekV2ForCausalLM"], "deepseek_v3", V3),   # transformers picks the class by
                                                                     # model_type
    ("", ["DeepseekV2ForCausalLM"], "deepseek_v2", V2),
    ("", ["KimiLinearForCausalLM"], "kimi_linear", KIMI_LINEAR),
    ("deepseek_v32", ["DeepseekV32ForCausalLM"], "deepseek_other", V3),  # planned as V3-shaped, not run
    ("kimi_k25", ["KimiK25ForConditionalGeneration"], "kimi_other", V3),
])
def test_a_config_names_one_family(mtype, archs, family, defaults):
    f = M.family_of(mtype, tuple(archs))
    assert f is not None and (f.name, f.hf_defaults) == (family, defaults)
    assert parse_hf_config({**BASE, "model_type": mtype, "architectures": archs}).family == defaults


def test_an_unknown_model_lists_the_registrys_types():
    with pytest.raises(ConfigError, match="supported model types: deepseek_v2, deepseek_v3, kimi_k2, "
                                          "kimi_k3, kimi_linear$"):
        parse_hf_config({**BASE, "model_type": "llama", "architectures": ["LlamaForCausalLM"]})


def test_every_model_preset_has_a_family_and_the_runtime_types_are_those_with_a_builder():
    for name in presets.names("models"):
        hc = parse_hf_config(presets.get("models", name)["config"])
        assert M.family_of(hc.model_type, hc.architectures) is not None, name
    assert M.RUNTIME_MODEL_TYPES == ("deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_linear")
    assert all((f.build is None) == (f.mla_config is None) for f in M.FAMILIES)


def test_the_registry_is_torch_free():
    import subprocess
    import sys
    code = "import sys, dcpctl.plan.model_registry, dcpctl.plan.hf_config; print('torch' in sys.modules)"
    assert (subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip()
            == "False")


def test_a_new_family_is_one_registry_line(monkeypatch, tmp_path):
    """A family the table did not have: the plan parses it with its defaults, the runtime finds its
    builder."""
    line = M.Family("toy_mla", ("toy_mla",), ("ToyMlaForCausalLM",), V2,
                    "tests.plan.test_model_registry:toy_build", "dcpctl.runtime.models.config:mla_config")
    monkeypatch.setattr(M, "FAMILIES", (*M.FAMILIES, line))
    cfg = {**BASE, "model_type": "toy_mla", "architectures": ["ToyMlaForCausalLM"], "num_experts_per_tok": 2}
    hc = parse_hf_config(cfg)
    assert hc.family == V2 and hc.vocab_size == 102400  # DeepseekV2Config's default, from the line's defaults
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    torch = pytest.importorskip("torch")
    from dcpctl.runtime.models import load_model, read_config
    from dcpctl.runtime.parallel import ParallelState
    assert read_config(tmp_path).model_type == "toy_mla"
    built = load_model(tmp_path, ParallelState.single(), False, torch.float32)
    assert built == ("toy", "toy_mla", tmp_path)
    without = dataclasses.replace(line, build=None, mla_config=None)
    monkeypatch.setattr(M, "FAMILIES", (*M.FAMILIES[:-1], without))
    from dcpctl.runtime.models import ModelLoadError
    with pytest.raises(ModelLoadError, match="not supported by the bundled runtime"):
        load_model(tmp_path, ParallelState.single(), False, torch.float32)


def toy_build(m):
    """The toy family's builder: what it was handed."""
    return "toy", m.parsed.model_type, m.path
