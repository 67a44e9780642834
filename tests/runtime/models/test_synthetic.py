"""Synthetic weights (models/synthetic.py) load in exactly the form a checkpoint would: the same tensors,
shapes, dtypes and FP8 blocks as the checkpoint reader gives for the same config and rank, so the same bytes,
which plan/weights.py predicts; and values that keep a forward's activations in range."""
from __future__ import annotations

import pytest
import torch

from dcpctl.plan.model import spec_from_path
from dcpctl.plan.weights import weight_bytes
from dcpctl.runtime.errors import ModelLoadError
from dcpctl.runtime.models import load_model
from dcpctl.runtime.models.footprint import weight_bytes as loaded_bytes
from dcpctl.runtime.models.quant import Fp8Weight
from dcpctl.runtime.parallel import ParallelState
from dcpctl.runtime.tiny_kimi import write_tiny_kimi_model
from tests.runtime.models.test_model_load import fake_state
from tests.runtime.models.test_weight_bytes import _topology, bf16, fp8  # noqa: F401 (fixtures)


def _tensors(obj, path="m", seen=None):
    """(path, kind, shape, dtype) of every weight reachable from a loaded model, in a fixed order."""
    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        return [(path, "t", tuple(obj.shape), obj.dtype)]
    if isinstance(obj, Fp8Weight):
        return [(path, "fp8", tuple(obj.w8.shape), obj.w8.dtype, tuple(obj.scale.shape), obj.block)]
    if id(obj) in seen or not (isinstance(obj, (list, tuple, dict)) or type(obj).__module__.startswith(
            "dcpctl.runtime.models.")) or type(obj).__name__ in ("Rotary", "MlaConfig", "Shards", "Fusions"):
        return []
    seen.add(id(obj))
    items = (obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple))
             else ((k, v)
                   for k, v in vars(obj).items() if k not in ("cfg", "ps", "shards", "rotary", "group")))
    return [x for k, v in items for x in _tensors(v, f"{path}.{k}", seen)]


@pytest.mark.parametrize("tp,attn_tp,dcp,ep,rep",
                         [(1, 1, 1, 1, False), (2, 2, 2, 1, True), (4, 4, 2, 2, True), (2, 1, 1, 2, False)])
@pytest.mark.parametrize("which,keep", [("bf16", False), ("fp8", True), ("fp8", False)])
def test_synthetic_weights_load_as_the_checkpoint_does(request, which, keep, tp, attn_tp, dcp, ep, rep):
    path, rank = request.getfixturevalue(which), tp - 1
    ps = fake_state(tp, rank, attn_tp, dcp, ep)
    real = load_model(path, ps, rep, torch.bfloat16, keep_fp8=keep)
    fake = load_model(path, ps, rep, torch.bfloat16, keep_fp8=keep, synthetic=0)
    assert _tensors(fake) == _tensors(real)
    assert loaded_bytes(fake) == loaded_bytes(real)
    planned = weight_bytes(spec_from_path(path), _topology(tp, attn_tp, dcp, ep), rep, keep)
    assert abs(planned - loaded_bytes(fake)) <= 0.01 * planned


def test_synthetic_needs_only_config_json(bf16, tmp_path):
    (tmp_path / "config.json").write_bytes((bf16 / "config.json").read_bytes())
    m = load_model(tmp_path, ParallelState.single(), False, torch.float32, synthetic=3)
    again = load_model(tmp_path, ParallelState.single(), False, torch.float32, synthetic=3)
    assert torch.equal(m.layers[0].attn.o_proj, again.layers[0].attn.o_proj)     # seeded
    assert torch.equal(m.norm, torch.ones_like(m.norm))
    w = m.layers[0].attn.o_proj
    assert abs(w.std().item() * w.shape[1] ** 0.5 - 1) < 0.1                    # N(0, 1/fan_in)


def test_a_synthetic_forward_keeps_activations_in_range(bf16, tmp_path):
    from tests.runtime.ref_context import greedy_run
    (tmp_path / "config.json").write_bytes((bf16 / "config.json").read_bytes())
    m = load_model(tmp_path, ParallelState.single(), False, torch.float32, synthetic=0)
    prefill, decode, _ = greedy_run(m, [[5, 9, 200, 17]], 3)
    for logits in (*prefill, *decode):
        assert torch.isfinite(logits).all() and 0.1 < logits.float().std().item() < 10


def test_synthetic_refuses_a_hybrid(tmp_path):
    path = write_tiny_kimi_model(tmp_path / "kimi")
    with pytest.raises(ModelLoadError, match="not a hybrid"):
        load_model(path, ParallelState.single(), False, torch.float32, synthetic=0)
