"""The one config.json parse (plan/hf_config.py) against transformers' own config classes: for a key
absent from the file it takes the class's default, it honours the class's aliases (and only those),
and every model preset and tiny model reads the same through both."""
import pytest

from dcpctl.plan import presets
from dcpctl.plan.hf_config import parse_hf_config
from dcpctl.plan.hf_defaults import DEFAULTS, HF_CLASSES, KEYS, KIMI_LINEAR, V2, V3
from dcpctl.plan.hf_layers import MLA
from dcpctl.plan.model import spec_from_config

transformers = pytest.importorskip("transformers")

IDENTITY = {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 8, "kv_lora_rank": 32}
HF_NAME = {(KIMI_LINEAR, "n_routed_experts"): "num_experts"}  # our field -> the class's attribute, where they
                                                              # differ
TYPES = {V2: "deepseek_v2", V3: "deepseek_v3", KIMI_LINEAR: "kimi_linear"}


def both(family, **keys):
    ours = parse_hf_config({"model_type": TYPES[family], **IDENTITY, **keys}, "test")
    theirs = getattr(transformers, HF_CLASSES[family])(**IDENTITY, **keys)
    return ours, theirs


@pytest.mark.parametrize("family", [V2, V3, KIMI_LINEAR])
def test_absent_keys_take_the_transformers_default(family):
    ours, theirs = both(family)
    fields = [f for f in DEFAULTS if f != "first_k_dense_replace" or family != KIMI_LINEAR]
    diff = {f: (getattr(ours, f), getattr(theirs, HF_NAME.get((family, f), f))) for f in fields
            if getattr(ours, f) != getattr(theirs, HF_NAME.get((family, f), f))}
    assert not diff, f"{family}: ours vs transformers {diff}"


@pytest.mark.parametrize("family,field,alias",
                         [(fam, f, a) for f, by in KEYS.items() for fam, names in by.items() for a in names])
def test_aliases_are_the_classes_attribute_map(family, field, alias):
    value = 6 if field != "norm_topk_prob" else not DEFAULTS[field][family]
    ours, theirs = both(family, **{alias: value})
    assert getattr(ours, field) == getattr(theirs, HF_NAME.get((family, field), field)) == value


@pytest.mark.parametrize("family,key", [(V3, "num_experts"), (V2, "num_local_experts"),
                                        (KIMI_LINEAR, "n_routed_experts"), (V3, "num_experts_per_token")])
def test_keys_the_class_ignores_are_ignored(family, key):
    ours, theirs = both(family, **{key: 6})
    field = "num_experts_per_tok" if key == "num_experts_per_token" else "n_routed_experts"
    assert getattr(ours, field) == getattr(theirs, HF_NAME.get((family, field), field)) != 6


def test_kimi_moe_layers_follow_first_k_dense_replace_as_transformers_does():
    for first in (None, 0, 2):
        keys = {} if first is None else {"first_k_dense_replace": first}
        ours, theirs = both(KIMI_LINEAR, **keys)
        assert list(ours.moe_layers) == [i for i, t in enumerate(theirs.mlp_layer_types) if t == "sparse"]


def _preset_configs():
    out = [(n, presets.get("models", n)["config"]) for n in ("deepseek-v3", "deepseek-v3.1", "kimi-k2",
                                                              "kimi-linear-48b-a3b", "tiny")]
    from dcpctl.runtime.tiny import tiny_config
    from dcpctl.runtime.tiny_kimi import tiny_kimi_config
    return out + [("tiny-model", tiny_config()), ("tiny-no-q-lora", tiny_config(q_lora_rank=None)),
                  ("tiny-kimi", tiny_kimi_config())]


@pytest.mark.parametrize("name,cfg", _preset_configs())
def test_presets_and_tiny_models_read_as_transformers_reads_them(name, cfg):
    ours = parse_hf_config(cfg, name)
    theirs = getattr(transformers, HF_CLASSES[ours.family])(**cfg)
    fields = [f for f in DEFAULTS if f != "first_k_dense_replace" or ours.family != KIMI_LINEAR]
    fields += ["hidden_size", "kv_lora_rank"]
    diff = {f: (getattr(ours, f), getattr(theirs, HF_NAME.get((ours.family, f), f))) for f in fields
            if getattr(ours, f) != getattr(theirs, HF_NAME.get((ours.family, f), f))}
    assert not diff, f"{name}: ours vs transformers {diff}"
    assert (ours.num_heads, ours.num_layers) == (theirs.num_attention_heads, theirs.num_hidden_layers)
    if ours.layer_kinds is not None:
        assert [k == MLA for k in ours.layer_kinds] == [t == "full_attention" for t in theirs.layer_types]
    spec = spec_from_config(cfg, name)  # the planner's ModelSpec is a projection of the same parse
    assert (spec.kv_row_elems, spec.mla_layers, spec.n_routed_experts) == \
        (ours.kv_row_elems, ours.mla_layers, ours.n_routed_experts)


def test_eos_ids_vocab_and_positions_accessors(tmp_path):
    import json
    from dcpctl.plan.hf_config import read_hf_config
    cfg = presets.get("models", "tiny")["config"] | {"eos_token_id": 3, "max_position_embeddings": 99}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    hc = read_hf_config(tmp_path)
    assert hc.eos_token_ids == (3,) and hc.limits() == (hc.vocab_size, 99)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [5, 6]}))
    assert read_hf_config(tmp_path).eos_token_ids == (5, 6)  # generation_config.json wins, as in transformers
