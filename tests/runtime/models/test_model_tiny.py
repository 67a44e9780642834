"""The built-in tiny checkpoint and the byte tokenizer."""
from __future__ import annotations

import hashlib

import pytest
import torch

from dcpctl.runtime.models import load_model
from dcpctl.runtime.parallel import ParallelState
from dcpctl.runtime.tiny import ensure_tiny_model, write_tiny_model
from dcpctl.runtime.tokenizer import ByteTokenizer, load_tokenizer
from tests.runtime.ref_context import greedy_run

TEXT = "Hello, wörld\n\t✓ DCP"


def _digest(path) -> str:
    return hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()


def test_ensure_is_deterministic_atomic_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("DCPCTL_CACHE", str(tmp_path / "cache"))
    first = ensure_tiny_model()
    assert first == tmp_path / "cache" / "tiny-deepseek"
    other = ensure_tiny_model(tmp_path / "elsewhere")
    assert _digest(first) == _digest(other)
    assert [p.name for p in first.parent.iterdir()] == ["tiny-deepseek"]  # no temporary left behind
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert ensure_tiny_model() == first and (first / "model.safetensors").stat().st_mtime_ns == stamp
    (first / "DCPCTL_TINY_VERSION").write_text("0")  # stale: rebuilt
    assert _digest(ensure_tiny_model()) == _digest(other)


def test_concurrent_ensure_gives_one_complete_copy(tmp_path):
    import multiprocessing as mp
    target = tmp_path / "shared"
    # spawn, not fork: a forked Pool child of a process whose torch already runs threads can deadlock
    with mp.get_context("spawn").Pool(3) as pool:
        paths = pool.map(ensure_tiny_model, [target] * 3)
    assert paths == [target] * 3 and sorted(p.name for p in tmp_path.iterdir()) == ["shared"]
    assert _digest(target) == _digest(write_tiny_model(tmp_path / "direct"))


def test_byte_tokenizer_roundtrip(tmp_path):
    tok = load_tokenizer(write_tiny_model(tmp_path))
    assert isinstance(tok, ByteTokenizer)
    ids = tok.encode(TEXT, add_bos=True)
    assert ids[0] == tok.bos_token_id and max(ids[1:]) < 256
    assert tok.decode(ids) == TEXT
    assert tok.decode([72, tok.eos_token_id, 105], skip_special=False) == "H<|eos|>i"


def test_hf_auto_tokenizer_agrees(tmp_path):
    transformers = pytest.importorskip("transformers")
    path = write_tiny_model(tmp_path)
    hf = transformers.AutoTokenizer.from_pretrained(str(path))
    ids = ByteTokenizer().encode(TEXT)
    assert hf.encode(TEXT, add_special_tokens=False) == ids and hf.decode(ids) == TEXT
    assert hf.eos_token_id == ByteTokenizer.eos_token_id


def test_hf_runs_the_tiny_checkpoint(tmp_path):
    transformers = pytest.importorskip("transformers")
    path = write_tiny_model(tmp_path)
    prompt = ByteTokenizer().encode("tiny", add_bos=True)
    ours = load_model(path, ParallelState.single(), False, torch.float64, hf_numerics=True)
    pre, _, _ = greedy_run(ours, [prompt], 0)
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float64,
                                                           attn_implementation="sdpa",
                                                           experts_implementation="eager")
    with torch.no_grad():
        ref = hf(torch.tensor([prompt])).logits[0]
    torch.testing.assert_close(pre[0], ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("overrides", [{"q_lora_rank": None}, {"tie_word_embeddings": True},
                                       {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}])
def test_variants_load_and_run(tmp_path, overrides):
    path = write_tiny_model(tmp_path, seed=3, num_hidden_layers=2, **overrides)
    if overrides.get("tie_word_embeddings"):  # a tied checkpoint stores no lm_head
        from safetensors.torch import load_file, save_file
        tensors = load_file(str(path / "model.safetensors"))
        del tensors["lm_head.weight"]
        save_file(tensors, str(path / "model.safetensors"))
    m = load_model(path, ParallelState.single(), False, torch.float64)
    _, _, outs = greedy_run(m, [[256, 1, 2]], 3)
    assert len(outs[0]) == 3 and all(0 <= t < 264 for t in outs[0])


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 0.25)])
def test_lower_precision_tracks_float64(tmp_path, dtype, tol):
    path = write_tiny_model(tmp_path)
    prompt = [256, 5, 6, 7, 8]
    ref = greedy_run(load_model(path, ParallelState.single(), False, torch.float64), [prompt], 0)[0][0]
    got = greedy_run(load_model(path, ParallelState.single(), False, dtype), [prompt], 0)[0][0]
    assert got.dtype == dtype
    assert (got.double().log_softmax(-1) - ref.log_softmax(-1)).abs().max() < tol
