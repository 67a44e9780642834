"""The attention-backend registry on CPU: every kernel is listed with its blocker's sentence, and a kernel
added as one registration is chosen by the selector on an explicit request or by a measured table that names
it, and run through its hooks by paged_attention (attention/backends): prepare for an eager batch, capture
(told whether the graph records) for a decode graph's batch."""
import json

import pytest
import torch

from dcpctl.runtime import settings
from dcpctl.runtime.attention import backends, selector
from dcpctl.runtime.attention.backends import ABSORBED, MHA, Absorbed, Backend
from dcpctl.runtime.attention.backends.absorbed_flashinfer import GRAPH_LAYOUT
from dcpctl.runtime.attention.layout import SeqChunk
from dcpctl.runtime.attention.paged import GraphPass, build_paged, paged_attention
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
    assert [(b.name, b.graph, b.one_token, b.reference) for b in backends.of_kind(ABSORBED)] == [
        ("triton", None, False, False), ("flashinfer", GRAPH_LAYOUT, True, False),
        ("flashmla", None, True, False), ("torch", None, False, True)]
    assert selector.mha(q, pool, 512).label == "torch reference"
    with pytest.raises(ValueError, match=r"absorbed attention backend 'fa3' is not registered; valid: "
                                         r"\['triton', 'flashinfer', 'flashmla', 'torch'\]"):
        backends.get(ABSORBED, "fa3")
    with pytest.raises(ValueError, match="is already registered"):
        backends.register(backends.get(ABSORBED, "triton"))
    sparse = type("Sparse", (Backend,), {"name": "x", "kind": "sparse"})
    with pytest.raises(ValueError, match=r"kind 'sparse' is not supported; valid: \['absorbed', 'mha'\]"):
        backends.register(sparse())


def test_one_set_of_names():
    """The registry, the shipped tuning tables and --attention-backend's choices use plan/attention_names.py's
    names, and torch_native (SGLang's name) is the one flag value that differs from its backend's."""
    from pathlib import Path
    from dcpctl.plan import attention_names as names
    from dcpctl.plan.request import DECODE_ATTENTION_BACKENDS
    assert [b.name for b in backends.of_kind(ABSORBED) if not b.reference] == list(names.MEASURED)
    assert backends.reference(ABSORBED).name == backends.reference(MHA).name == names.REFERENCE
    fixed = {f: names.from_flag(f) for f in DECODE_ATTENTION_BACKENDS
             if (ABSORBED, names.from_flag(f)) in backends.REGISTRY}
    assert fixed == {"flashmla": "flashmla", "flashinfer": "flashinfer", "triton": "triton",
                     "torch_native": "torch"}
    assert names.from_flag("fa3") == "fa3" and names.PORTABLE in names.MEASURED
    tables = Path(names.__file__).parents[1] / "tuning" / "attention"
    cells = [c for f in tables.glob("*.json") for c in json.loads(f.read_text())["data"]["cells"]]
    columns = {b for c in cells for b in c["us"]}
    assert columns and columns <= set(names.MEASURED)


class _Fake(Absorbed):
    """A new kernel: one registration; counts its prepares, captures and runs and answers zeros."""

    name = "fake"

    def __init__(self):
        self.prepares, self.runs, self.captures = 0, 0, []

    def prepare(self, call):
        self.prepares += 1
        return ("planned", call.lay.max_local_len)

    def capture(self, call, kept, recording):
        self.captures.append(recording)
        kept.setdefault(self.name, []).append(recording)
        return self.prepare(call)

    def run(self, call, state):
        assert state == ("planned", call.lay.max_local_len)
        self.runs += 1
        t, h = call.q.shape[:2]
        return MLAOut(call.q.new_zeros(t, h, call.v_dim), call.q.new_zeros(t, h), "e")


@pytest.fixture
def fake():
    f = _Fake()
    backends.register(f)
    selector.rule_for.cache_clear()
    try:
        yield f
    finally:
        backends.unregister(ABSORBED, "fake")
        selector.rule_for.cache_clear()
    assert "fake" not in [b.name for b in backends.of_kind(ABSORBED)]


def _batch(tokens=1):
    alloc = VirtualAllocator(64, 4, 1)
    alloc.allocate(0, 5)
    pool = KVPool(1, 68, 40, torch.float32)
    return pool.kv[0], build_paged(alloc, [SeqChunk(0, 5 - tokens, tokens)], 0, 4)


def _two_layers(kv, lay, requested="auto"):
    for _ in range(2):
        res = paged_attention(torch.randn(lay.positions.numel(), 2, 40), kv, lay, 0.1, 32, 0, 1,
                              requested=requested)
    return res


def test_a_new_kernel_is_one_registration_asked_for(fake):
    kv, lay = _batch()
    res = _two_layers(kv, lay, "fake")
    assert lay.selected == "fake" and (fake.prepares, fake.runs) == (1, 2)   # prepare once a batch
    assert res.o.shape == (1, 2, 32) and not res.o.any()
    kv, lay = _batch()
    _two_layers(kv, lay, "triton")          # ours cannot run on CPU: the rule's first usable kernel, said why
    assert lay.selected == "fake"


def test_a_new_kernel_is_chosen_by_the_table_that_names_it(fake, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DCPCTL_LAUNCH_CONFIG", raising=False)
    cell = {"heads": 2, "kv_dtype": "fp32", "page_size": 4, "device": "cpu", "batch": 1, "ctx": 4,
            "us": {"fake": 1.0, "triton": 2.0}}
    path = tmp_path / "table.json"
    path.write_text(json.dumps({"device": "cpu", "commit": "test", "data": {"cells": [cell]}}))
    kv, lay = _batch()
    with settings.using(attention_table=str(path)):
        _two_layers(kv, lay)
    assert lay.selected == "fake" and (fake.prepares, fake.runs) == (1, 2)
    assert ("local attention: fake for 2 kernel heads, fp32 KV, page 4 on cpu (measured "
            "(" in capsys.readouterr().err)


def test_a_one_token_kernel_leaves_longer_chunks_to_the_reference(fake, monkeypatch):
    monkeypatch.setattr(fake, "one_token", True)
    kv, lay = _batch(tokens=4)
    _two_layers(kv, lay, "fake")            # a prefill chunk: ours is blocked on CPU, so the torch reference
    assert lay.selected == "torch" and fake.runs == 0


def test_a_graph_batch_tells_the_backend_it_is_captured(fake):
    """A decode graph's batch reaches the backend's capture hook (not prepare), told whether the graph
    records, with the graphs' kept dict; an eager batch reaches prepare."""
    kept = {}
    for recording in (False, True):
        kv, lay = _batch()
        lay.graph = GraphPass(kept, recording)
        _two_layers(kv, lay, "fake")
    assert fake.captures == [False, True] and kept == {"fake": [False, True]} and fake.runs == 4
    kv, lay = _batch()
    _two_layers(kv, lay, "fake")
    assert fake.captures == [False, True] and fake.prepares == 3
