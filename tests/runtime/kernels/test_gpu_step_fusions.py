"""The decode step's fused kernels on a GPU (skipped without CUDA): bf16 and fp16 against the torch forms
(fused_kernels_check.py), the fused model against the unfused one, and the fused KV write really taken."""
import pytest
import torch

from dcpctl.runtime.attention.dcp import SeqChunk, build_context
from dcpctl.runtime.kv import KVPool, VirtualAllocator
from dcpctl.runtime.models import load_model
from dcpctl.runtime.kernels.fusions import ENV
from dcpctl.runtime.parallel import ParallelState
from tests.runtime import fused_kernels_check as check
from tests.runtime.configs import typed

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_kernels_equal_torch_forms(dtype):
    check.check_all("cuda", (dtype,))


@pytest.mark.parametrize("T,H", [(1, 128), (32, 128), (7, 16), (4096, 128)])
def test_rope_q_exact_at_serving_shapes(T, H):
    check.check_rope_q("cuda", torch.bfloat16, True, False, True, T=T, H=H)


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    from dcpctl.runtime.tiny import write_tiny_model
    return str(write_tiny_model(tmp_path_factory.mktemp("gf") / "m", num_hidden_layers=2,
                                first_k_dense_replace=2))


def _prefilled(path: str, forbid_pool_write: bool = False):
    # a prefill of three prompts -> (the model, its pool, the context of their next decode step)
    ps, dev = ParallelState.single(), torch.device("cuda")
    model = load_model(path, ps, False, torch.bfloat16, dev)
    alloc = VirtualAllocator(256, 16, 1)
    pool = KVPool(model.cfg.num_layers, (alloc.num_pages + 1) * 16, model.cfg.latent_dim, torch.bfloat16, dev)
    if forbid_pool_write:
        def refuse(*_):
            raise AssertionError("the fused path wrote the KV rows through KVPool.write")
        pool.write = refuse
    lens = [5, 40, 17]
    for rid, n in enumerate(lens):
        alloc.allocate(rid, n + 1)
    decisions = typed({"dcp_comm_backend": "ag_rs", "attention_path": "paged"})
    ids = torch.arange(sum(lens), device=dev) % 250
    chunks = [SeqChunk(r, 0, n) for r, n in enumerate(lens)]
    ctx = build_context(alloc, pool, ps.dcp, decisions, chunks, model.cfg.kv_lora_rank)
    model.forward(ids, ctx.positions, ctx)
    chunks = [SeqChunk(r, n, 1) for r, n in enumerate(lens)]
    return model, pool, build_context(alloc, pool, ps.dcp, decisions, chunks, model.cfg.kv_lora_rank)


def _step(path: str, forbid_pool_write: bool) -> tuple[torch.Tensor, torch.Tensor, int]:
    # a prefill of three prompts, then one decode step -> logits [3, V], the pool, kv_lora_rank
    model, pool, ctx = _prefilled(path, forbid_pool_write)
    logits = model.logits(model.forward(torch.tensor([3, 4, 5], device="cuda"), ctx.positions, ctx))
    return logits, pool.kv, model.cfg.kv_lora_rank


def test_fused_model_matches_unfused_and_writes_kv_itself(path, monkeypatch):
    # qkv_a off on both sides (the same projection GEMMs): layer 0's rows see the same inputs, so their rope
    # part is bit-identical and the norm part within a bf16 step; later layers and the logits within bf16
    # noise
    monkeypatch.setenv(ENV, "all")
    want, want_kv, L = _step(path, False)
    monkeypatch.setenv(ENV, "qkv_a")
    got, got_kv, _ = _step(path, True)
    assert torch.equal(got_kv[0, :, L:], want_kv[0, :, L:])
    assert check._close_norm(got_kv[0, :, :L], want_kv[0, :, :L])
    torch.testing.assert_close(got_kv.float(), want_kv.float(), rtol=2e-2, atol=5e-2)
    torch.testing.assert_close(got.float(), want.float(), rtol=5e-2, atol=5e-2)
    monkeypatch.delenv(ENV)            # and with q_a + kv_a as one GEMM
    joined, _, _ = _step(path, True)
    torch.testing.assert_close(joined.float(), want.float(), rtol=5e-2, atol=5e-2)


def _captured_step(path: str) -> tuple[torch.Tensor, torch.Tensor]:
    # a prefill of three prompts (eager), one decode step captured in a CUDA graph, then its inputs changed in
    # place (other tokens) and the graph replayed: -> that replay's logits [3, V] and the pool.  The warm-up
    # step and the capture saw tokens 3, 4, 5, so a replay that read a KV row or a q rope before the side
    # stream wrote it would read the old tokens' values
    model, pool, ctx = _prefilled(path)
    ids = torch.tensor([3, 4, 5], device="cuda")
    model.forward(ids, ctx.positions, ctx)            # compiles every kernel before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        hidden = model.forward(ids, ctx.positions, ctx)
    ids.copy_(torch.tensor([101, 57, 230], device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    return model.logits(hidden), pool.kv.clone()


def test_overlap_changes_no_bit_of_a_captured_step(path, monkeypatch):
    # the side stream (side_stream.py) reorders nothing inside a kernel: the same logits and pool bit for bit
    # as the one-stream capture.  Each side block starts with a ~1 ms sleep (captured with it), so a read on
    # the main stream that is not joined after the side block's write would see the previous tokens' values.
    # The capture forks exactly 5 times (the angles, then the KV write and the q rope of each of the 2 layers)
    # and joins twice (once a layer): 7 uses of the side stream, none outside the capture
    import contextlib

    from dcpctl.runtime.kernels import side_stream
    uses = []
    real_side, real_fork = side_stream._side, side_stream.SideStream.fork

    @contextlib.contextmanager
    def slow_fork(self):
        with real_fork(self):
            if self.on:
                torch.cuda._sleep(2_000_000)
            yield

    monkeypatch.setattr(side_stream, "_side", lambda d: uses.append(d) or real_side(d))
    monkeypatch.setattr(side_stream.SideStream, "fork", slow_fork)
    monkeypatch.setenv(ENV, "overlap")
    want, want_kv = _captured_step(path)
    assert not uses
    monkeypatch.delenv(ENV)
    got, got_kv = _captured_step(path)
    assert len(uses) == 7
    assert torch.equal(got, want) and torch.equal(got_kv, want_kv)


def test_pdl_changes_no_bit_of_an_eager_or_captured_step(path, monkeypatch):
    # programmatic dependent launch (pdl.py) changes when a kernel starts, never what it computes
    from dcpctl.runtime.kernels import pdl
    monkeypatch.setenv(ENV, "pdl")
    want, want_kv, _ = _step(path, False)
    want_g, want_g_kv = _captured_step(path)
    assert not pdl.ON
    monkeypatch.delenv(ENV)
    got, got_kv, _ = _step(path, False)
    got_g, got_g_kv = _captured_step(path)
    assert pdl.ON == (torch.cuda.get_device_capability()[0] >= 9)
    assert torch.equal(got, want) and torch.equal(got_kv, want_kv)
    assert torch.equal(got_g, want_g) and torch.equal(got_g_kv, want_g_kv)
