"""The decode layer's L2 prefetch (models/l2_prefetch.py): its plan from the environment, the chunk layout, that
nothing runs off sm_90 CUDA, the kernel compiled for sm_90, and (gpu) the model's output unchanged by it."""
from __future__ import annotations

import re

import pytest
import torch

from dcpctl.runtime.models import l2_prefetch as lp
from dcpctl.runtime.models.errors import ModelLoadError
from dcpctl.runtime.models.fusions import Fusions


def test_plan_default_and_custom(monkeypatch):
    monkeypatch.delenv(lp.ENV, raising=False)
    monkeypatch.delenv(lp.OPTS_ENV, raising=False)
    assert lp.plan_from_env() == lp.Plan(())          # off by default: not yet timed on a GPU
    monkeypatch.setenv(lp.ENV, "w_vc:1,o_proj:0.125")
    assert lp.plan_from_env() == lp.Plan((("w_vc", 1.0), ("o_proj", 0.125)))
    monkeypatch.setenv(lp.ENV, "o_proj:0.25")
    monkeypatch.setenv(lp.OPTS_ENV, "ctas=4,chunk=2048,side=1")
    assert lp.plan_from_env() == lp.Plan((("o_proj", 0.25),), ctas=4, chunk=2048, side=True)
    monkeypatch.setenv(lp.ENV, "")
    assert lp.plan_from_env().shares == ()


@pytest.mark.parametrize("spec, opts, words", [
    ("q_b:1", "", "q_b"), ("o_proj:0", "", "(0, 1]"), ("o_proj:x", "", "not a number"),
    ("w_vc:1", "chunk=24", "multiple of 16"), ("w_vc:1", "warps=4", "warps"),
])
def test_plan_rejects_bad_values(monkeypatch, spec, opts, words):
    monkeypatch.setenv(lp.ENV, spec)
    monkeypatch.setenv(lp.OPTS_ENV, opts)
    with pytest.raises(ModelLoadError, match=re.escape(words)):
        lp.plan_from_env()


@pytest.mark.parametrize("nbytes, share, chunk", [
    (16 << 20, 1.0, 1024), (235 << 20, 0.125, 1024), (235 << 20, 0.3, 4096), (5000, 0.5, 1024), (512, 1.0, 1024),
])
def test_layout_spreads_whole_chunks_inside_the_weight(nbytes, share, chunk):
    n, stride = lp.layout(nbytes, share, chunk)
    assert stride % chunk == 0 and stride == chunk * round(1 / share)
    if n:
        assert (n - 1) * stride + chunk <= nbytes < n * stride + chunk     # the last whole chunk is the last one
        assert abs(n * chunk / nbytes - chunk / stride) < chunk / nbytes + 1e-9
    else:
        assert nbytes < chunk


def test_nothing_runs_on_the_cpu(monkeypatch):
    monkeypatch.setenv(lp.ENV, "w_vc:1,o_proj:0.5")
    w = torch.zeros(64, 64, dtype=torch.bfloat16)
    assert lp.targets(lp.plan_from_env(), {"w_vc": w, "o_proj": w}) is None
    with lp.during(None):
        pass


def test_unfused_turns_it_off(monkeypatch):
    monkeypatch.setenv("DCPCTL_UNFUSED", "l2_prefetch")
    assert Fusions.from_env().l2_plan is None and not Fusions.from_env().l2_prefetch
    monkeypatch.setenv("DCPCTL_UNFUSED", "all")
    assert Fusions.from_env().l2_plan is None
    monkeypatch.setenv("DCPCTL_UNFUSED", "swiglu")
    monkeypatch.delenv(lp.ENV, raising=False)
    assert Fusions.from_env().l2_plan == lp.plan_from_env()


def test_kernel_compiles_for_sm90_to_bulk_prefetches():
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    sig = {"base": "*u8", "n_chunks": "i32", "stride": "i32", "CHUNK": "constexpr", "BLOCK": "constexpr"}
    src = ASTSource(lp._l2_prefetch_kernel, sig, constexprs={"CHUNK": 1024, "BLOCK": 32},
                    attrs={(0,): [["tt.divisibility", 16]]})
    try:
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=1))
    except (RuntimeError, FileNotFoundError) as e:
        if "ptxas" not in str(e):
            raise
        pytest.skip(f"Triton cannot compile for sm_90 here: {e}")
    assert "cp.async.bulk.prefetch.L2.global" in k.asm["ptx"]
    assert "ld.global" not in k.asm["ptx"], "a prefetch reads nothing into registers"


gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("side", [False, True])
def test_model_unchanged_by_the_prefetch_gpu(tmp_path, monkeypatch, side):
    from tests.runtime.test_gpu_step_fusions import _step
    from dcpctl.runtime.tiny import write_tiny_model
    path = str(write_tiny_model(tmp_path / "m", num_hidden_layers=2, first_k_dense_replace=2))
    monkeypatch.setenv("DCPCTL_UNFUSED", "l2_prefetch")
    want, want_kv, _ = _step(path, False)
    monkeypatch.delenv("DCPCTL_UNFUSED")
    monkeypatch.setenv(lp.ENV, "w_vc:1,o_proj:0.5")
    monkeypatch.setenv(lp.OPTS_ENV, f"ctas=2,chunk=256,side={int(side)}")
    from dcpctl.runtime.models import load_model
    from dcpctl.runtime.parallel import ParallelState
    m = load_model(path, ParallelState.single(), False, torch.bfloat16, torch.device("cuda"))
    assert all(layer.attn.l2 is not None and len(layer.attn.l2.items) == 2 for layer in m.layers)  # it does run
    got, got_kv, _ = _step(path, False)
    assert torch.equal(got, want) and torch.equal(got_kv, want_kv)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("side", [False, True])
def test_prefetch_inside_a_cuda_graph_gpu(side):
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs an sm_90 GPU")
    w = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(8, 1024, device="cuda", dtype=torch.bfloat16)
    t = lp.targets(lp.Plan((("o_proj", 0.25),), ctas=4, side=side), {"o_proj": w})
    assert t is not None and t.items[0][1] == lp.layout(w.numel() * 2, 0.25, 1024)[0]
    out = torch.empty(8, 4096, device="cuda", dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        with lp.during(t):
            torch.matmul(x, w.t(), out=out)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        with lp.during(t):
            torch.matmul(x, w.t(), out=out)
    x.copy_(torch.randn_like(x))
    g.replay()
    got = out.clone()
    torch.matmul(x, w.t(), out=out)       # the same call eagerly, without a prefetch
    torch.cuda.synchronize()
    assert torch.equal(got, out)
