"""The attention-backend registry on CPU: every kernel is listed with its blocker's sentence, and a kernel added
as one registration is chosen by an explicit request or by a measured table that names it, and run through its
prepare and run by paged_attention (attention/backends)."""
import json

import pytest
import torch

from dcpctl.runtime import settings
from dcpctl.runtime.attention import backend_choice, backends
from dcpctl.runtime.attention.backends import ABSORBED, MHA, Backend
from dcpctl.runtime.attention.backends.absorbed_flashinfer import GRAPH_LAYOUT
from dcpctl.runtime.attention.layout import SeqChunk
from dcpctl.runtime.attention.paged import build_paged, paged_attention
from dcpctl.runtime.attention.triton_mla import MLAOut
from dcpctl.runtime.kv import KVPool, VirtualAllocator


def test_every_backend_is_listed_with_its_cpu_blocker():
    q, pool = torch.zeros(1, 2, 576, dtype=torch.bfloat16), torch.zeros(4, 64, 576, dtype=torch.bfloat16)
    said = {(b.kind, b.name): b.blocker(q, pool, 512) for b in backends.REGISTRY.values()}
    assert said == {(ABSORBED, "triton"): "the KV pool is on the CPU",
                    (ABSORBED, "flashinfer"): "the KV pool is not on a GPU",
                    (ABSORBED, "flashmla"): "the KV pool is not on a GPU",
                    (ABSORBED, "torch"): None,
                    (MHA, "cudnn"): "the queries are not on a GPU",
                    (MHA, "torch"): None}
    assert [(b.name, b.graph, b.one_token, b.fallback) for b in backends.of_kind(ABSORBED)] == [
        ("triton", None, False, False), ("flashinfer", GRAPH_LAYOUT, True, False), ("flashmla", None, True, False),
        ("torch", None, False, True)]
    assert backends.runnable(MHA, q, pool, 512).label == "torch reference"
    with pytest.raises(ValueError, match=r"absorbed attention backend 'fa3' is not registered; valid: \['triton', "
                                         r"'flashinfer', 'flashmla', 'torch'\]"):
        backends.get(ABSORBED, "fa3")
    with pytest.raises(ValueError, match="is already registered"):
        backends.register(backends.get(ABSORBED, "triton"))
    with pytest.raises(ValueError, match=r"kind 'sparse' is not supported; valid: \['absorbed', 'mha'\]"):
        backends.register(Backend("x", "sparse", lambda q, pool, v: None, lambda *a: None))


class _Fake:
    """A new kernel: one registration; counts its prepares and runs and answers zeros."""

    def __init__(self, one_token=False):
        self.prepares, self.runs = 0, 0
        self.backend = Backend("fake", ABSORBED, lambda q, pool, v_dim: None, self.run, prepare=self.prepare,
                               one_token=one_token)

    def prepare(self, call):
        self.prepares += 1
        return ("planned", call.lay.max_local_len)

    def run(self, call, state):
        assert state == ("planned", call.lay.max_local_len)
        self.runs += 1
        t, h = call.q.shape[:2]
        return MLAOut(call.q.new_zeros(t, h, call.v_dim), call.q.new_zeros(t, h), "e")


@pytest.fixture
def fake():
    f = _Fake()
    backends.register(f.backend)
    backend_choice.rule_for.cache_clear()
    try:
        yield f
    finally:
        backends.unregister(ABSORBED, "fake")
        backend_choice.rule_for.cache_clear()
    assert "fake" not in [b.name for b in backends.of_kind(ABSORBED)]


def _batch(tokens=1):
    alloc = VirtualAllocator(64, 4, 1)
    alloc.allocate(0, 5)
    pool = KVPool(1, 68, 40, torch.float32)
    return pool.kv[0], build_paged(alloc, [SeqChunk(0, 5 - tokens, tokens)], 0, 4)


def _two_layers(kv, lay, requested="auto"):
    for _ in range(2):
        res = paged_attention(torch.randn(lay.positions.numel(), 2, 40), kv, lay, 0.1, 32, 0, 1, requested=requested)
    return res


def test_a_new_kernel_is_one_registration_asked_for(fake):
    kv, lay = _batch()
    res = _two_layers(kv, lay, "fake")
    assert lay.backend_state["backend"] == "fake" and (fake.prepares, fake.runs) == (1, 2)   # prepare once a batch
    assert res.o.shape == (1, 2, 32) and not res.o.any()
    kv, lay = _batch()
    _two_layers(kv, lay, "triton")          # ours cannot run on CPU: the rule's first usable kernel, said why
    assert lay.backend_state["backend"] == "fake"


def test_a_new_kernel_is_chosen_by_the_table_that_names_it(fake, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DCPCTL_LAUNCH_CONFIG", raising=False)
    cell = {"heads": 2, "kv_dtype": "fp32", "page_size": 4, "device": "cpu", "batch": 1, "ctx": 4,
            "us": {"fake": 1.0, "triton": 2.0}}
    path = tmp_path / "table.json"
    path.write_text(json.dumps({"device": "cpu", "commit": "test", "data": {"cells": [cell]}}))
    kv, lay = _batch()
    with settings.using(attention_table=str(path)):
        _two_layers(kv, lay)
    assert lay.backend_state["backend"] == "fake" and (fake.prepares, fake.runs) == (1, 2)
    assert ("local attention: fake for 2 kernel heads, fp32 KV, page 4 on cpu (measured (" in capsys.readouterr().err)


def test_a_one_token_kernel_leaves_longer_chunks_to_the_fallback(fake, monkeypatch):
    monkeypatch.setitem(backends.REGISTRY, (ABSORBED, "fake"), Backend(
        "fake", ABSORBED, fake.backend.blocker, fake.run, prepare=fake.prepare, one_token=True))
    kv, lay = _batch(tokens=4)
    _two_layers(kv, lay, "fake")            # a prefill chunk: ours is blocked on CPU, so the torch reference
    assert lay.backend_state["backend"] == "torch" and fake.runs == 0
