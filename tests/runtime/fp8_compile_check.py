"""Compile the block-FP8 GEMM for sm_90 without a GPU (Triton's own ptxas): lowering errors the interpreter
cannot see, and whether the K loop's weight loads are software-pipelined (cp.async, `stages` buffers).

Pointer and size arguments carry the 16-divisibility the JIT gives them at a real launch (DeepSeek-V3's
dimensions are multiples of 16); without it Triton does not pipeline the loads at all."""
from __future__ import annotations

from dataclasses import dataclass

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from dcpctl.runtime.kernels.fp8_gemm import _fp8_gemm_kernel

POINTERS = ("x_ptr", "xs_ptr", "w_ptr", "ws_ptr", "ends_ptr", "out_ptr", "part_ptr", "count_ptr")
INTS = ("R", "N", "K", "nkb", "kb_per_split", "splits", "sx", "m_rows", "sw_e", "sw_n", "sws_e", "sws_n")
DIVISIBLE = ("N", "K", "sx", "sw_e", "sw_n")   # multiples of 16 at V3's shapes (nkb = 56 is not)


@dataclass(frozen=True)
class Variant:
    bm: int
    bn: int
    quant: bool
    split: bool
    swap: bool
    red: int
    grouped: bool
    warps: int = 4
    stages: int = 3
    pdl: bool = False
    a16: bool = False     # w8a16: bf16 rows, each e4m3 tile converted for a bf16 MMA
    f16: bool = False     # w8a16's fp16 MMA for the bf16 rows (a16_mma="fp16")
    fold: bool = False    # w8a16 with the weight factor folded into the tile (Tiles.fold)


def compile_sm90(v: Variant):
    """The compiled kernel (its asm dict has ttgir, ptx, cubin) for sm_90 with this variant's constexprs."""
    sig = {p: "*fp8e4nv" if p in ("x_ptr", "w_ptr") else "*i32" if p in ("ends_ptr", "count_ptr") else "*fp32"
           for p in POINTERS}
    sig["out_ptr"] = "*bf16"
    if v.quant or v.a16:   # the kernel reads the bf16 rows itself
        sig["x_ptr"] = sig["xs_ptr"] = "*bf16"
    sig.update({n: "i32" for n in INTS})
    const = dict(B0=128, BK=128, BM=v.bm, BN=v.bn, GROUPED=v.grouped, SPLIT=v.split, QUANT=v.quant,
                 SWAP=v.swap, RED=v.red, PDL=v.pdl, A16=v.a16, F16=v.f16, FOLD=v.fold)
    sig.update({k: "constexpr" for k in const})
    names = list(sig)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in POINTERS + DIVISIBLE}
    src = ASTSource(_fp8_gemm_kernel, sig, constexprs=const, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=v.warps, num_stages=v.stages, launch_pdl=v.pdl))


GEMV_INTS = ("R", "N", "K", "E", "nkb", "kb_per_split", "splits", "sx", "sw_e", "sw_n", "sws_e", "sws_n")


def compile_gemv_sm90(bn: int, kb: int, bm: int, quant: bool, split: bool, grouped: bool, warps: int = 4,
                      stages: int = 3, a16: bool = False):
    """The few-rows kernel (fp8_gemv.py) compiled for sm_90, as compile_sm90."""
    from dcpctl.runtime.kernels.fp8_gemv import _fp8_gemv_kernel
    sig = {p: "*fp8e4nv" if p in ("x_ptr", "w_ptr") else "*i32" if p in ("ends_ptr", "count_ptr") else "*fp32"
           for p in POINTERS}
    sig["out_ptr"] = "*bf16"
    if quant or a16:
        sig["x_ptr"] = sig["xs_ptr"] = "*bf16"
    sig.update({n: "i32" for n in GEMV_INTS})
    const = dict(B0=128, B1=128, KB=kb, BN=bn, BM=bm, EP=256, GROUPED=grouped, SPLIT=split,
                 QUANT=quant and not a16, RED=max(1, min(8, 4096 // (bm * bn))), STAGES=stages, A16=a16)
    sig.update({k: "constexpr" for k in const})
    names = list(sig)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in POINTERS + DIVISIBLE}
    src = ASTSource(_fp8_gemv_kernel, sig, constexprs=const, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps))


class Sm90Driver:
    """The calls Triton's JIT makes of the active driver (binding a launch, JITFunction.preload), answered for
    an sm_90 target without a GPU: `driver.set_active(Sm90Driver())`, then restore `driver._active`
    (reset_active() would look for a real driver)."""
    target = GPUTarget("cuda", 90, 32)

    def get_current_target(self) -> GPUTarget:
        return self.target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int) -> int:
        return 0
