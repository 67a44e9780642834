"""kernels/gemm16.py: which 16-bit linear layers take dcpctl's split-K kernel (CPU), and the kernel against
F.linear, its determinism, its split counts left at zero and its CUDA-graph replay (GPU)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dcpctl.runtime.models import quant
from dcpctl.runtime.kernels import gemm16
from dcpctl.runtime.kernels.fusions import FUSIONS, Fusions
from dcpctl.runtime.kernels.gemm16 import Tiles16, choose, pick

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
H200, _ = gemm16.shipped("NVIDIA H200", 90)
TABLE = H200


@pytest.fixture(autouse=True)
def h200_table(monkeypatch):
    monkeypatch.setattr(gemm16, "TABLE", H200)


def test_the_h200_table_is_the_measured_one():
    assert H200[(2112, 7168)] == ((8, Tiles16(bk=256)), (32, Tiles16(bk=256, stages=4)))
    assert H200[(24576, 1536)] == ((8, Tiles16(per_sm=2)),)
    assert H200[(7168, 16384)] == ((8, Tiles16(stages=4)), (32, Tiles16()))
    assert H200[(4096, 7168)] == ((8, Tiles16(stages=4)),)
    assert len(H200) == 4
    assert gemm16.shipped("NVIDIA H100 80GB HBM3", 90)[0] == H200      # the nearest sm_90 table
    assert gemm16.shipped("NVIDIA B200", 100) == ({}, "no gemm16 table for NVIDIA B200 or another sm_100 "
                                                      "GPU: built-in defaults")


def test_the_table_bounds_pick_the_setting():
    assert choose(2112, 7168, 2) == TABLE[(2112, 7168)][0][1]
    assert choose(2112, 7168, 8) == TABLE[(2112, 7168)][0][1]
    assert choose(2112, 7168, 9) == TABLE[(2112, 7168)][1][1]
    assert choose(2112, 7168, 32) == TABLE[(2112, 7168)][1][1]
    assert choose(2112, 7168, 33) is None           # above the last bound: cuBLAS
    assert choose(2112, 7168, 1) is None            # one row was not swept
    assert choose(24576, 1536, 16) is None          # q_b_proj lost at 32 rows: only its 8-row bound
    assert choose(7168, 2048, 8) is None            # the dense down lost everywhere
    assert choose(100, 300, 8) is None              # a shape nobody measured


def test_cpu_and_disabled_calls_keep_cublas(monkeypatch):
    x, w = torch.zeros(8, 7168, dtype=torch.bfloat16), torch.zeros(2112, 7168, dtype=torch.bfloat16)
    gemm16.configure(True, "cpu")
    assert not gemm16.ON and pick(x, w) is None
    monkeypatch.setattr(gemm16, "ON", True)
    assert pick(x, w) is None                        # a CPU tensor
    assert pick(x.float(), w.float()) is None        # not 16-bit


def test_it_is_a_fusion_the_environment_turns_off(monkeypatch):
    assert "gemm16" in FUSIONS
    monkeypatch.setenv("DCPCTL_UNFUSED", "gemm16")
    assert not Fusions.from_env().gemm16
    monkeypatch.delenv("DCPCTL_UNFUSED")
    assert Fusions.from_env().gemm16


def test_a_benchmark_table_replaces_shapes_and_bad_files_are_refused(tmp_path):
    from dcpctl.runtime.errors import ModelLoadError
    f = tmp_path / "t.json"
    f.write_text('{"24576,1536": [[32, {"per_sm": 2}]], "7168,2048": []}')
    table = gemm16.read_table(str(f), H200)
    assert table[(24576, 1536)] == ((32, Tiles16(per_sm=2)),)     # replaced: now up to 32 rows
    assert table[(7168, 16384)] == H200[(7168, 16384)]            # the others as shipped
    assert table[(7168, 2048)] == ()
    f.write_text('{"24576": [[32, {}]]}')
    with pytest.raises(ModelLoadError, match="--gemm16-table .* not a GEMM table"):
        gemm16.read_table(str(f), H200)


@pytest.fixture
def on():
    gemm16.configure(True, "cuda")
    yield gemm16.ON
    gemm16.configure(False, "cuda")


def _operands(R, N, K, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(R, K, device="cuda", dtype=torch.bfloat16, generator=g)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02
    return x, w


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("R", [2, 8, 17, 32])
@pytest.mark.parametrize("N,K,t", [(2112, 7168, Tiles16(bk=256, stages=4)), (7168, 16384, Tiles16()),
                                   (24576, 1536, Tiles16(per_sm=2)), (100, 300, Tiles16(bk=128)),
                                   (130, 4000, Tiles16(bn=32, bk=512, warps=8, stages=3))])
def test_gpu_kernel_matches_linear(R, N, K, t):
    # odd N and K too: the masks of the last N tile and K split
    from dcpctl.runtime.kernels.fp8_parts import _counters
    x, w = _operands(R, N, K, R)
    got = gemm16.linear16(x, w, t)
    ref = F.linear(x.double(), w.double())
    err = float((got.double() - ref).abs().max() / ref.abs().max())
    assert got.dtype == x.dtype and got.shape == (R, N) and err < 8e-3, err
    assert torch.equal(gemm16.linear16(x, w, t), got)         # the partials are summed in a fixed order
    assert int(_counters(x.device, 1).abs().sum()) == 0        # every tile's count left at zero for the next
                                                               # GEMM


@pytest.mark.gpu
@needs_gpu
def test_gpu_linear_takes_it_and_replays_in_a_graph(on):
    if not on:
        pytest.skip("no gemm16 tuning table for this GPU")
    x, w = _operands(8, 2112, 7168)
    assert pick(x, w) is not None
    eager = quant.linear(x, w)
    assert torch.equal(eager, gemm16.linear16(x, w, pick(x, w)))
    static = x.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        quant.linear(static, w)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = quant.linear(static, w)
    for seed in (1, 2):
        static.copy_(_operands(8, 2112, 7168, seed)[0])
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, quant.linear(static, w))
