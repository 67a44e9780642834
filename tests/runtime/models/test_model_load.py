"""Checkpoint loading: sharded materialization, layouts (index, wrapper, kimi_k2, MTP), and clear errors."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from dcpctl.runtime.models import ModelLoadError, load_model, read_config
from dcpctl.runtime.parallel import Axis, ParallelState
from dcpctl.runtime.tiny import write_tiny_model
from tests.runtime.ref_context import greedy_run

PROMPT = [256, 10, 20, 30, 40]


def fake_state(tp: int, rank: int, attn_tp: int | None = None, dcp: int = 1, ep: int = 1) -> ParallelState:
    """A rank's view without process groups: enough for loading (which runs no collective)."""
    attn_tp = attn_tp or tp
    a = rank % attn_tp
    moe_tp = tp // ep
    ax = lambda ranks, r: Axis(None, ranks, r)  # noqa: E731
    return ParallelState(rank, tp, ax(list(range(tp)), rank), ax(list(range(attn_tp)), a),
                         ax(list(range(attn_tp)), a), ax(list(range(dcp)), a % dcp),
                         ax(list(range(ep)), rank // moe_tp), rank // attn_tp, tp // attn_tp)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def reference(tiny):
    return greedy_run(load_model(tiny, ParallelState.single(), False, torch.float64), [PROMPT], 2)


def _copy(tiny, tmp_path):
    dst = tmp_path / "ckpt"
    shutil.copytree(tiny, dst)
    return dst


def _edit_config(path, **changes):
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(changes)
    (path / "config.json").write_text(json.dumps(cfg))


def _tensors(path):
    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def test_rank_materializes_only_its_shards(tiny):
    m = load_model(tiny, fake_state(tp=4, rank=3, ep=2), False, torch.float32)
    attn, moe = m.layers[0].attn, m.layers[1].mlp
    assert (attn.q_b.shape == (2 * 24, 32) and attn.w_kc.shape == (2, 16, 32)
            and attn.w_vc.shape == (2, 32, 16))
    assert attn.o_proj.shape == (64, 2 * 16)
    assert m.layers[0].mlp.gate.shape == (128 // 4, 64)
    assert moe.first == 4 and len(moe.experts) == 4 and moe.experts[0].gate.shape == (32 // 2, 64)
    assert moe.shared.down.shape == (64, 32 // 4)
    assert m.embed.shape == (66, 64) and m.shards.vocab_start == 198


def test_replicated_q_keeps_the_dcp_groups_heads(tiny):
    dec = True
    m = load_model(tiny, fake_state(tp=4, rank=3, dcp=2), dec, torch.float32)
    attn = m.layers[0].attn
    assert attn.q_is_group and m.shards.q_head_start == 4 and attn.q_b.shape == (4 * 24, 32)
    assert attn.w_kc.shape == (4, 16, 32) and attn.w_vc.shape == (2, 32, 16)
    assert not load_model(tiny, fake_state(tp=4, rank=3, dcp=1), dec, torch.float32).layers[0].attn.q_is_group


def test_sharded_index_and_progress(tiny, tmp_path, reference):
    dst = tmp_path / "sharded"
    dst.mkdir()
    for f in tiny.iterdir():
        if f.name != "model.safetensors":
            shutil.copy(f, dst / f.name)
    tensors, names = _tensors(tiny), sorted(_tensors(tiny))
    weight_map = {}
    for i in range(3):
        part = {n: tensors[n] for n in names[i::3]}
        save_file(part, str(dst / f"model-0000{i + 1}-of-00003.safetensors"))
        weight_map.update({n: f"model-0000{i + 1}-of-00003.safetensors" for n in part})
    (dst / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    calls = []
    m = load_model(dst, ParallelState.single(), False, torch.float64,
                   progress=lambda d, t: calls.append((d, t)))
    assert calls == [(1, 3), (2, 3), (3, 3)]
    assert greedy_run(m, [PROMPT], 2)[2] == reference[2]
    (dst / "model-00002-of-00003.safetensors").unlink()
    with pytest.raises(ModelLoadError,
                       match="shard model-00002-of-00003.safetensors listed in .* is missing"):
        load_model(dst, ParallelState.single(), False, torch.float64)


def test_wrong_tensor_shape_names_tensor_file_and_shapes(tiny, tmp_path):
    dst = _copy(tiny, tmp_path)
    tensors = _tensors(dst)
    tensors["model.layers.2.self_attn.kv_b_proj.weight"] = torch.zeros(255, 32)
    save_file(tensors, str(dst / "model.safetensors"))
    msg = r"tensor model.layers.2.self_attn.kv_b_proj.weight in model.safetensors has shape \[255, 32\], " \
          r"expected \[256, 32\] from config.json"
    with pytest.raises(ModelLoadError, match=msg):
        load_model(dst, ParallelState.single(), False, torch.float64)


def test_missing_tensor_and_missing_weights(tiny, tmp_path):
    dst = _copy(tiny, tmp_path)
    tensors = _tensors(dst)
    del tensors["model.layers.1.mlp.experts.5.up_proj.weight"]
    save_file(tensors, str(dst / "model.safetensors"))
    with pytest.raises(ModelLoadError, match="tensor model.layers.1.mlp.experts.5.up_proj.weight is not in"):
        load_model(dst, ParallelState.single(), False, torch.float64)
    (dst / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}")
    with pytest.raises(ModelLoadError, match=r"cannot read safetensors file .*model.safetensors"):
        load_model(dst, ParallelState.single(), False, torch.float64)
    (dst / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match=r"no \*.safetensors weights in"):
        load_model(dst, ParallelState.single(), False, torch.float64)


@pytest.mark.parametrize("changes,match", [
    ({"model_type": "llama", "architectures": ["LlamaForCausalLM"]},
     r"model_type 'llama' \(architectures \['LlamaForCausalLM'\]\) is not an MLA model dcpctl supports; "
     r"supported model types: deepseek_v2, deepseek_v3, kimi_k2"),
    ({"rope_parameters": {"rope_type": "longrope", "rope_theta": 1.0}},
     "rope type 'longrope' is not supported"),
    ({"quantization_config": {"quant_method": "fp8"}}, "quantized checkpoints are not supported"),
    ({"kv_lora_rank": None}, "required key 'kv_lora_rank' is missing"),
    ({"n_group": 3}, r"n_routed_experts \(8\) must be a multiple of n_group \(3\)"),
    ({"num_experts_per_tok": 5}, r"num_experts_per_tok \(5\) exceeds the 4 experts that topk_group \(1\)"),
])
def test_bad_config(tiny, tmp_path, changes, match):
    dst = _copy(tiny, tmp_path)
    _edit_config(dst, **changes)
    with pytest.raises(ModelLoadError, match=match):
        load_model(dst, ParallelState.single(), False, torch.float64)


def test_heads_must_divide_attention_tp(tiny):
    with pytest.raises(ModelLoadError, match=r"num_attention_heads \(8\) is not a multiple of attn_tp \(3\)"):
        load_model(tiny, fake_state(tp=3, rank=0), False, torch.float32)


def test_kimi_k2_wrapper_and_mtp_layers(tiny, tmp_path, reference):
    dst = _copy(tiny, tmp_path)
    tensors = {"language_model." + k: v for k, v in _tensors(dst).items()}
    tensors["language_model.model.layers.4.self_attn.kv_b_proj.weight"] = torch.zeros(3, 3)  # MTP: never read
    save_file(tensors, str(dst / "model.safetensors"))
    inner = json.loads((dst / "config.json").read_text())
    inner.update(model_type="kimi_k2")
    (dst / "config.json").write_text(json.dumps({"architectures": ["KimiK3ForConditionalGeneration"],
                                                 "model_type": "kimi_k3", "text_config": inner}))
    assert read_config(dst).model_type == "kimi_k2"
    m = load_model(dst, ParallelState.single(), False, torch.float64)
    pre, _, outs = greedy_run(m, [PROMPT], 2)
    assert outs == reference[2]
    torch.testing.assert_close(pre[0], reference[0][0], rtol=0, atol=0)


def test_empty_batch_forward(tiny):
    m = load_model(tiny, ParallelState.single(), False, torch.float32)
    from tests.runtime.ref_context import RefContext
    ctx = RefContext(m.cfg.kv_lora_rank)
    ctx.set_batch([], [])
    h = m.forward(torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), ctx)
    assert h.shape == (0, 64) and m.logits(h).shape == (0, 264)
