"""Gate and up as one weight: quant.concat_rows / rows and DenseMLP's one-GEMM path."""
import torch
import torch.nn.functional as F

from dcpctl.runtime.models.mlp import DenseMLP
from dcpctl.runtime.models.quant import Fp8Weight, concat_rows, rows
from tests.runtime.models.test_model_fp8 import quantize


def test_block_fp8_halves_concatenate_on_block_bounds_only():
    (g8, gs), (u8, us) = quantize(torch.randn(32, 48), (16, 16)), quantize(torch.randn(32, 48), (16, 16))
    both = concat_rows(Fp8Weight(g8, gs, (16, 16)), Fp8Weight(u8, us, (16, 16)))
    assert both.shape == (64, 48) and both.scale.shape == (4, 3)
    up = rows(both, 32, 64)
    assert torch.equal(up.w8.view(torch.uint8), u8.view(torch.uint8)) and torch.equal(up.scale, us)
    assert up.w8.data_ptr() == both.w8.data_ptr() + 32 * 48          # a view, not a copy
    (a8, as_), (b8, bs) = quantize(torch.randn(24, 48), (16, 16)), quantize(torch.randn(24, 48), (16, 16))
    assert concat_rows(Fp8Weight(a8, as_, (16, 16)), Fp8Weight(b8, bs, (16, 16))) is None   # 24: mid-block
    assert concat_rows(torch.randn(4, 8), Fp8Weight(g8, gs, (16, 16))) is None


def test_dense_mlp_runs_gate_and_up_as_one_gemm_and_frees_the_halves():
    g = torch.Generator().manual_seed(0)
    w = {n: torch.randn(shape, generator=g, dtype=torch.float64) for n, shape in
         (("m.gate_proj.weight", (12, 8)), ("m.up_proj.weight", (12, 8)), ("m.down_proj.weight", (8, 12)))}
    t = dict(w)
    mlp = DenseMLP("m.", t)
    assert mlp.gate_up.shape == (24, 8) and set(t) == {"m.down_proj.weight"}
    assert torch.equal(mlp.gate, w["m.gate_proj.weight"]) and torch.equal(mlp.up, w["m.up_proj.weight"])
    x = torch.randn(5, 8, generator=g, dtype=torch.float64)
    want = F.linear(F.silu(x @ w["m.gate_proj.weight"].T) * (x @ w["m.up_proj.weight"].T),
                    w["m.down_proj.weight"])
    torch.testing.assert_close(mlp(x), want, rtol=1e-12, atol=1e-12)
