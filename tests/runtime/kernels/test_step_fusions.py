"""The decode step's fusions (kernels/fusions.py): the fused model equals the unfused one, and the kernels
equal the torch forms (in Triton's interpreter here; on the GPU in test_gpu_step_fusions.py)."""

import pytest
import torch

from dcpctl.runtime.attention.dcp import SeqChunk, build_context
from dcpctl.runtime.kv import KVPool, VirtualAllocator
from dcpctl.runtime.models import load_model
from dcpctl.runtime.errors import ModelLoadError
from dcpctl.runtime.kernels.fusions import ENV, FUSIONS, Fusions
from dcpctl.runtime.parallel import ParallelState
from tests.runtime.configs import typed
from tests.runtime.interp import run_in_interpreter

PAGE, LENS = 4, [3, 9]


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    from dcpctl.runtime.tiny import write_tiny_model
    return str(write_tiny_model(tmp_path_factory.mktemp("f") / "m", num_hidden_layers=2,
                                first_k_dense_replace=2))


def _steps(path: str, dtype: torch.dtype, path_kind: str) -> tuple[list[torch.Tensor], torch.Tensor]:
    # prefill LENS, then two decode steps -> hidden of every forward, the pool
    ps = ParallelState.single()
    model = load_model(path, ps, False, dtype, "cpu")
    alloc = VirtualAllocator(64, PAGE, 1)
    pool = KVPool(model.cfg.num_layers, (alloc.num_pages + 1) * PAGE, model.cfg.latent_dim, dtype)
    decisions = typed({"dcp_comm_backend": "ag_rs", "attention_path": path_kind})
    g = torch.Generator().manual_seed(3)
    outs = []
    for rid, n in enumerate(LENS):
        alloc.allocate(rid, n + 2)
    batches = [([SeqChunk(r, 0, n) for r, n in enumerate(LENS)],
                torch.randint(0, 250, (sum(LENS),), generator=g))]
    batches += [([SeqChunk(r, n + s, 1) for r, n in enumerate(LENS)], torch.tensor([7 + s, 9]))
                for s in range(2)]
    for chunks, ids in batches:
        ctx = build_context(alloc, pool, ps.dcp, decisions, chunks, model.cfg.kv_lora_rank)
        outs.append(model.forward(ids, ctx.positions, ctx))
    return outs, pool.kv


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
@pytest.mark.parametrize("path_kind", ["paged", "layout"])
def test_fused_model_equals_unfused(path, dtype, path_kind, monkeypatch):
    # bit-identical with every fusion but qkv_a; the joined GEMM (N = q_lora + R) may block its sums apart
    monkeypatch.setenv(ENV, "all")
    want, want_kv = _steps(path, dtype, path_kind)
    monkeypatch.setenv(ENV, "qkv_a")
    got, got_kv = _steps(path, dtype, path_kind)
    assert torch.equal(got_kv, want_kv)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    if dtype == torch.float64:
        monkeypatch.delenv(ENV)
        got, got_kv = _steps(path, dtype, path_kind)
        torch.testing.assert_close(got_kv, want_kv, rtol=1e-12, atol=1e-12)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_q_a_and_kv_a_are_one_weight_and_views_of_it(path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    attn = load_model(path, ParallelState.single(), False, torch.float64, "cpu").layers[0].attn
    monkeypatch.setenv(ENV, "qkv_a")
    apart = load_model(path, ParallelState.single(), False, torch.float64, "cpu").layers[0].attn
    assert apart.qkv_a is None and attn.pair is None
    Q = attn.cfg.q_lora_rank
    assert attn.qkv_a.shape == (Q + attn.cfg.latent_dim, attn.cfg.hidden_size)
    assert torch.equal(attn.q_a, apart.q_a) and torch.equal(attn.kv_a, apart.kv_a)
    assert attn.kv_a.data_ptr() == attn.qkv_a.data_ptr() + Q * attn.cfg.hidden_size * 8   # views, not copies


def test_unfused_env_names_are_checked(monkeypatch):
    monkeypatch.setenv(ENV, "rope, add_norm")
    with pytest.raises(ModelLoadError, match=r"unknown fusions \['rope'\]; valid: qkv_a, q_rope"):
        Fusions.from_env()
    monkeypatch.setenv(ENV, " add_norm ,v_out")
    f = Fusions.from_env()
    assert not f.add_norm and not f.v_out and f.q_rope and f.kv_write and f.qkv_a
    monkeypatch.setenv(ENV, "all")
    assert not any(getattr(Fusions.from_env(), n) for n in FUSIONS)


def test_kernels_in_the_interpreter_equal_the_torch_forms():
    run_in_interpreter("tests/runtime/fused_kernels_check.py")


def test_side_stream_is_inline_outside_a_capture(monkeypatch):
    # CPU tensors, and CUDA ones outside a graph capture: fork runs its block on the caller's stream and join
    # is a no-op (an eager step would pay an event record and a wait per fork); only a capture on x's device
    # turns it on
    from dcpctl.runtime.kernels import side_stream
    x = torch.zeros(2)
    side = side_stream.SideStream(x, True)
    ran = []
    with side.fork():
        ran.append(1)
    side.join()
    assert ran == [1] and not side.on and not side.pending

    class FakeCuda:                     # stands in for a CUDA tensor: only its flags are read
        is_cuda, device = True, torch.device("cuda", 0)
    for capturing, on, want in [(False, True, False), (True, True, True), (True, False, False)]:
        monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda c=capturing: c)
        assert side_stream.SideStream(FakeCuda(), on).on is want
