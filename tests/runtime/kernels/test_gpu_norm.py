"""The fused RMSNorm kernel (kernels/norm_triton.py) against the torch form it replaces (skipped without
CUDA): within one bf16 rounding step, for contiguous rows and for a strided column slice (the kv_a norm's
input)."""
import pytest
import torch

from dcpctl.runtime.kernels.norm_triton import fused_norm_ok, rms_norm_fused
from dcpctl.runtime.models.ops import rms_norm_torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize("rows,dim", [(1, 7168), (33, 7168), (5, 1536), (64, 512), (0, 64)])
def test_fused_norm_equals_torch_form(rows, dim):
    g = torch.Generator(device="cuda").manual_seed(rows + dim)
    full = torch.randn(rows, dim + 64, device="cuda", generator=g).to(torch.bfloat16) * 3
    w = (torch.rand(dim, device="cuda", generator=g) + 0.5).to(torch.bfloat16)
    for x in (full[:, :dim].contiguous(), full[:, :dim]):       # contiguous, then a strided slice
        assert fused_norm_ok(x, w, torch.float32)
        got, ref = rms_norm_fused(x, w, 1e-6), rms_norm_torch(x, w, 1e-6)
        assert got.shape == ref.shape and got.dtype == ref.dtype
        ulp = ref.float().abs() * 2.0 ** -7 + 1e-30           # one bf16 step at the value
        assert bool(((got.float() - ref.float()).abs() <= ulp).all())
        assert (got == ref).float().mean() > 0.99 if rows else True
