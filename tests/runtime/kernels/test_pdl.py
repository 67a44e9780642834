"""Programmatic dependent launch (runtime/kernels/pdl.py): off on the CPU, each PDL kernel compiled for sm_90
waits (griddepcontrol.wait) before its first load or store of a tensor, and on a GPU (`gpu`) every PDL kernel
launched right after a kernel that releases its dependents at once and writes the inputs late still reads what
it wrote."""
import re

import pytest
import torch

from dcpctl.runtime.kernels import pdl
from dcpctl.runtime.kernels.fusions import Fusions


def test_off_on_the_cpu_and_when_unfused(monkeypatch):
    assert pdl.configure(True, "cpu") is None and not pdl.ON
    assert pdl.kw() == {"PDL": False}
    monkeypatch.setenv("DCPCTL_UNFUSED", "pdl")
    assert not Fusions.from_env().pdl


def _kernels():
    # (name, kernel, signature, constexprs) at V3's decode shapes
    from dcpctl.runtime.attention.fused_merge import _merge_kernel
    from dcpctl.runtime.kernels.gemm16 import _gemm16_kernel
    from dcpctl.runtime.kernels.head_bmm_triton import _head_bmm_kernel
    from dcpctl.runtime.kernels.norm_triton import _add_rms_norm_kernel, _rms_norm_kernel
    from dcpctl.runtime.kernels.rope_triton import _kv_rows_kernel, _rope_q_kernel
    from dcpctl.runtime.kernels.swiglu_triton import _swiglu_kernel
    bf, i32, f32, i64 = "*bf16", "i32", "fp32", "*i64"
    return [
        ("rms_norm", _rms_norm_kernel, dict(X=bf, W=bf, Y=bf, stride_x=i32, stride_y=i32, D=i32, eps=f32),
         dict(BLOCK=2048)),
        ("add_rms_norm", _add_rms_norm_kernel, dict(X=bf, R=bf, W=bf, H=bf, Y=bf, stride_x=i32, stride_r=i32,
                                                    stride_h=i32, stride_y=i32, D=i32, eps=f32),
         dict(BLOCK=8192)),
        ("swiglu", _swiglu_kernel, dict(H=bf, Y=bf, stride_h=i32, stride_y=i32, I=i32),
         dict(BLOCK=1024, LIBDEVICE=True)),
        ("rope_q", _rope_q_kernel,
         dict(X=bf, COS="*fp32", SIN="*fp32", Y=bf, H=i32, sxt=i32, sxh=i32, syt=i32,
              syh=i32, sct=i32), dict(HALF=32, BLOCK_H=16, INTERLEAVED=True, FP32_MATH=True)),
        ("kv_rows", _kv_rows_kernel,
         dict(KV=bf, W=bf, COS="*fp32", SIN="*fp32", DST=bf, ROWS=i64, SLOTS=i64, skt=i32,
              sdt=i32, sct=i32, L=i32, eps=f32),
         dict(BLOCK_L=512, HALF=32, INTERLEAVED=True, FP32_MATH=True)),
        ("merge", _merge_kernel,
         dict(O="*fp32", LSE="*fp32", OUT=bf, OUT_LSE="*fp32", S=i32, s_os=i32, s_om=i32,
              s_ls=i32, s_lm=i32, V=i32, H=i32, HL=i32, s_oc=i32, s_on=i32, s_oh=i32, s_lc=i32,
              s_ln=i32, s_lh=i32), dict(LSE_SCALE=1.0, S_POW2=2, BLOCK_V=512)),
        ("head_bmm", _head_bmm_kernel,
         dict(X=bf, W=bf, O=bf, M=i32, sxb=i32, sxm=i32, swb=i32, swk=i32, sob=i32,
              som=i32), dict(K=512, N=128, BM=32, BK=64, BN=64)),
        ("gemm16", _gemm16_kernel,
         dict(x_ptr=bf, w_ptr=bf, out_ptr=bf, part_ptr="*fp32", count_ptr="*i32", R=i32,
              N=i32, K=i32, sx=i32, sw=i32, k_per_split=i32, splits=i32),
         dict(BM=32, BN=64, BK=128, SPLIT=True)),
    ]


def _compile(kernel, sig: dict, const: dict):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    sig = dict(sig)
    sig.update({k: "constexpr" for k in const})
    try:
        return triton.compile(ASTSource(kernel, sig, constexprs=const), target=GPUTarget("cuda", 90, 32),
                              options=dict(num_warps=4, launch_pdl=const["PDL"]))
    except (RuntimeError, FileNotFoundError) as e:   # no ptxas in this Triton build
        if "ptxas" not in str(e):
            raise
        pytest.skip(f"Triton cannot compile for sm_90 here: {e}")


@pytest.mark.parametrize("i", range(8))
def test_each_kernel_waits_before_its_first_tensor_access(i):
    pytest.importorskip("triton")
    name, kernel, sig, const = _kernels()[i]
    ptx = _compile(kernel, sig, dict(const, PDL=True)).asm["ptx"]
    body = ptx.split(".entry")[1]
    wait = body.index("griddepcontrol.wait")
    first = re.search(r"\b(ld|st|atom|red|cp\.async)\.(global|shared::cluster)", body)
    assert first and first.start() > wait, f"{name}: a tensor access before the PDL wait"
    assert body.index("griddepcontrol.launch_dependents") > wait
    off = _compile(kernel, sig, dict(const, PDL=False)).asm["ptx"]
    assert "griddepcontrol" not in off


def test_the_gluon_attention_kernel_waits_before_its_first_load():
    pytest.importorskip("triton")
    from dcpctl.runtime.attention.gluon_mla import gluon_available
    from tools.ptxas_report import compile_kernel
    if not gluon_available():
        pytest.skip("no Gluon of the tested Triton here")
    for tma in (0, 1):
        body = compile_kernel("gluon", [64, 2, tma], pdl=True)[0].split(".entry")[1]
        first = re.search(r"\b(ld|st|atom|red|cp\.async)\.(global|shared::cluster)", body)
        assert (first
                and first.start() > body.index("griddepcontrol.wait")
                < body.index("griddepcontrol.launch_dependents"))
        assert "griddepcontrol" not in compile_kernel("gluon", [64, 2, tma])[0]


needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _late(src: torch.Tensor, spin_ns: int = 2_000_000, wait: bool = False) -> torch.Tensor:
    # a zeroed twin of src that a kernel fills with src's bytes ~2 ms after it released its dependents
    # (griddepcontrol.launch_dependents at its start), so a PDL kernel reading the twin without waiting reads
    # zeros
    from tests.runtime.pdl_check import late_copy
    dst = torch.zeros_like(src)
    late_copy(src, dst, spin_ns)
    return dst


def _cases(dev):
    # (name, fn(x) -> output, x): each wrapper of a PDL kernel, x its input that the kernel before writes.  fn
    # launches nothing before its PDL kernel (outputs come from torch.empty or exist already), so that kernel
    # runs right after the late writer
    from dcpctl.runtime.attention.fused_merge import merge_partials_triton
    from dcpctl.runtime.kernels.gemm16 import Tiles16, linear16
    from dcpctl.runtime.kernels.head_bmm_triton import head_bmm
    from dcpctl.runtime.kernels.norm_triton import add_rms_norm_fused, rms_norm_fused
    from dcpctl.runtime.kernels.rope_triton import kv_rows_into, rope_q_into
    from dcpctl.runtime.kernels.swiglu_triton import swiglu_fused
    g = torch.Generator().manual_seed(0)
    bf = dict(device=dev, dtype=torch.bfloat16)

    def r(*shape, **kw):
        kw = kw or bf
        return torch.randn(*shape, generator=g, dtype=kw["dtype"]).to(dev)
    w7k, w512, cos, sin = r(7168), r(512), r(32, 32, dtype=torch.float32), r(32, 32, dtype=torch.float32)
    res, w_vc, w_lin = r(32, 7168), r(128, 512, 128) * 0.05, r(2112, 7168) * 0.02
    lse = torch.rand(2, 1024, generator=g).to(dev)
    rows = torch.arange(32, device=dev)
    slots = torch.randperm(64, generator=g)[:32].to(dev)

    def kv_rows(kv):
        dst = torch.empty(64, 576, **bf)
        kv_rows_into(kv, w512, 1e-6, cos, sin, dst, rows, slots, True, True)
        return dst[slots]

    def rope_q(q):
        out = torch.empty(32, 128, 64, **bf)
        rope_q_into(q, cos, sin, out, True, True)
        return out

    def bmm(o):
        out = torch.empty(128, 32, 128, **bf)
        head_bmm(o, w_vc, out)
        return out

    def merge(o):
        mo, ml = merge_partials_triton(o, lse, out_dtype=torch.bfloat16)
        return torch.cat([mo.float().flatten(), ml.flatten()])
    return [("rms_norm", lambda x: rms_norm_fused(x, w7k, 1e-6), r(32, 7168)),
            ("add_rms_norm", lambda x: torch.cat(add_rms_norm_fused(x, res, w7k, 1e-6)), r(32, 7168)),
            ("swiglu", lambda h: swiglu_fused(h, 2048), r(32, 4096)),
            ("rope_q", rope_q, r(32, 128, 64)),
            ("kv_rows", kv_rows, r(32, 576)),
            ("merge", merge, r(2, 1024, 512, dtype=torch.float32)),
            ("head_bmm", bmm, r(128, 32, 512)),
            ("gemm16", lambda x: linear16(x, w_lin, Tiles16(bk=256)), r(32, 7168))]


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("i", range(8))
def test_gpu_each_kernel_reads_what_the_kernel_before_wrote(i):
    dev = torch.device("cuda")
    assert pdl.configure(True, dev) is None and pdl.ON
    try:
        name, fn, x = _cases(dev)[i]
        want = fn(x)
        for _ in range(3):
            got = fn(_late(x))
            torch.cuda.synchronize()
            assert torch.equal(got, want), f"{name} read its input before the kernel before wrote it"
    finally:
        pdl.configure(False, dev)


@pytest.mark.gpu
@needs_gpu
def test_gpu_a_pdl_kernel_without_the_wait_would_race():
    # the control that makes the test above able to fail: a copy launched with PDL that does not wait reads
    # the late twin before it is written
    from tests.runtime.pdl_check import copy_no_wait
    x = torch.randn(1 << 16, device="cuda")
    copy_no_wait(_late(x))             # compiled now: a compile between the two launches would outlast the
                                       # spin
    torch.cuda.synchronize()
    got = copy_no_wait(_late(x))
    torch.cuda.synchronize()
    assert not torch.equal(got, x) and got.abs().sum() == 0
