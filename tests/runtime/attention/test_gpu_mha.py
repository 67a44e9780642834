"""The MHA form on one CUDA device (skipped without CUDA): cuDNN's (o, lse) against the exact reference, the
shard attention in bf16 against float64, and greedy ids equal across the two forms on the trained tiny
model."""
from __future__ import annotations

import pytest
import torch

from dcpctl.runtime.attention.backends.mha_cudnn import _cudnn, _efficient, _sdpa_kernel
from dcpctl.runtime.attention.backends.mha_torch import reference_kernel
from dcpctl.runtime.attention.mha import ShardChunk, shard_attention
from dcpctl.runtime.parallel import ParallelState

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize("op", [_cudnn, _efficient], ids=["cudnn", "efficient"])
@pytest.mark.parametrize("t,s,causal", [(64, 64, True), (48, 200, False), (300, 300, True), (1, 77, False)])
def test_sdpa_kernels_return_natural_lse_and_match_reference(op, t, s, causal):
    g = torch.Generator("cuda").manual_seed(t + s)
    q, k = (torch.randn(n, 16, 192, generator=g, device="cuda").bfloat16() for n in (t, s))
    v = torch.randn(s, 16, 128, generator=g, device="cuda").bfloat16()
    o, lse = _sdpa_kernel(op, q, k, v, causal, 192 ** -0.5)
    o_ref, lse_ref = reference_kernel(q.double(), k.double(), v.double(), causal, 192 ** -0.5)
    assert o.shape == (t, 16, 128) and lse.shape == (t, 16)
    # base e: a log2 LSE is off by ~30%
    torch.testing.assert_close(lse.double(), lse_ref, rtol=0, atol=2e-3)
    torch.testing.assert_close(o.double(), o_ref, rtol=0, atol=3e-2)


@pytest.mark.parametrize("t,s", [(300, 1024 + 37), (300, 2048), (129, 500), (300, 2048 + 300), (257, 768)])
def test_cudnn_kernel_with_quantized_keys_matches_reference(t, s):
    # the backend's kernel as the MHA form calls it, unmasked: query rows padded to a bucket, keys split into
    # a multiple of KEY_QUANTUM, then of KEY_STEP through cuDNN, the rest through the memory-efficient kernel,
    # merged by LSE
    from dcpctl.runtime.attention.backends.mha_cudnn import cudnn_kernel
    g = torch.Generator("cuda").manual_seed(t + s)
    q, k = (torch.randn(n, 16, 192, generator=g, device="cuda").bfloat16() for n in (t, s))
    kv = torch.randn(s, 16, 256, generator=g, device="cuda").bfloat16()
    v = kv[..., 128:]                                 # strided, as the up-projection's view
    o, lse = cudnn_kernel(q, k, v, False, 192 ** -0.5)
    o_ref, lse_ref = reference_kernel(q.double(), k.double(), v.double(), False, 192 ** -0.5)
    assert o.shape == (t, 16, 128) and lse.shape == (t, 16)
    torch.testing.assert_close(lse.double(), lse_ref, rtol=0, atol=2e-3)
    torch.testing.assert_close(o.double(), o_ref, rtol=0, atol=3e-2)


def test_shard_attention_bf16_matches_float64():
    # two chunks (one with a cached prefix), dcp rank 1 of 2, key blocks of 40 rows: every call kind runs
    g = torch.Generator("cuda").manual_seed(0)
    L, rope, heads, c, rank = 512, 64, 8, 2, 1
    pool = torch.randn(400, L + rope, generator=g, device="cuda").bfloat16()
    w = (torch.randn(heads, 256, L, generator=g, device="cuda") / L ** 0.5).bfloat16()
    q = torch.randn(300, heads, 192, generator=g, device="cuda").bfloat16()
    slots = torch.randperm(400, generator=g, device="cuda")
    chunks = [ShardChunk(0, 200, 0, 0, 100, slots[:100]), ShardChunk(200, 100, 250, 125, 175, slots[100:275])]
    budget = 40 * heads * (128 + 128 + 192) * 2
    o, lse = shard_attention(q, pool, chunks, w, L, rank, c, 192 ** -0.5, budget)
    o64, lse64 = shard_attention(q.double(), pool.double(), chunks, w.double(), L, rank, c, 192 ** -0.5,
                                 budget)
    seen = torch.isfinite(lse64)
    assert torch.equal(seen, torch.isfinite(lse))
    torch.testing.assert_close(lse[seen].double(), lse64[seen], rtol=0, atol=5e-2)
    torch.testing.assert_close(o[seen].double(), o64[seen], rtol=0, atol=5e-2)


def test_greedy_ids_equal_across_forms():
    from dcpctl.launch.default_model import default_model
    from dcpctl.runtime.models import load_model
    from tests.runtime.models.test_kimi_driver import dcp_ctx, kimi_greedy
    model = load_model(str(default_model().path), ParallelState.single(), False, torch.bfloat16,
                       torch.device("cuda"))
    text = b"The quick brown fox jumps over the lazy dog. " * 12
    prompts = [[256] + list(text[:500]), [256] + list(text[:130])]     # BOS, then bytes
    outs = {}
    for form in ("absorbed", "mha"):
        make = dcp_ctx(model, ParallelState.single(), {}, capacity=2048, page=64, form=form)
        outs[form] = kimi_greedy(model, prompts, 16, make, chunk=256)[2]
    assert outs["mha"] == outs["absorbed"]
