"""Test-only kernels for test_pdl.py: a copy that releases its dependents at once and writes late, and a PDL
copy that does not wait (the race the step's kernels must not have)."""
import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents


@triton.jit
def _late_copy_kernel(SRC, DST, n, spin_ns, BLOCK: tl.constexpr):
    gdc_launch_dependents()
    t0 = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False,
                                   pack=1)
    t = t0
    while t - t0 < spin_ns:
        t = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False,
                                      pack=1)
    for i in range(0, n, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        tl.store(DST + offs, tl.load(SRC + offs, mask=offs < n), mask=offs < n)


@triton.jit
def _copy_kernel(SRC, DST, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(DST + offs, tl.load(SRC + offs, mask=offs < n), mask=offs < n)


def late_copy(src: torch.Tensor, dst: torch.Tensor, spin_ns: int) -> None:
    # one program: spin, then copy src's bytes into dst
    s, d = src.view(torch.uint8).flatten(), dst.view(torch.uint8).flatten()
    _late_copy_kernel[(1,)](s, d, s.numel(), spin_ns, BLOCK=4096)


def copy_no_wait(src: torch.Tensor) -> torch.Tensor:
    dst = torch.empty_like(src)
    s, d = src.flatten(), dst.flatten()
    _copy_kernel[(triton.cdiv(s.numel(), 1024),)](s, d, s.numel(), BLOCK=1024, launch_pdl=True)
    return dst
