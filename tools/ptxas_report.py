"""Registers, spills and shared memory of the local MLA decode kernels for sm_90, compiled on any machine.

    python -m tools.ptxas_report triton BLOCK_H BLOCK_N WARPS STAGES TMA
    python -m tools.ptxas_report gluon BLOCK_N STAGES TMA

Needs Triton 3.6 (the device's version; the Gluon kernel compiles only with it), e.g. a side venv:
`pip install torch==2.13.0 numpy && pip install --no-deps triton==3.6.0`.  No GPU: triton.compile takes
an explicit GPUTarget("cuda", 90, 32), DeepSeek shapes (v 512, rope 64, page 64, bf16), pointers and
strides specialized as 16-divisible like a real launch; then Triton's own ptxas prints `-v` for sm_90a
(registers, spill bytes, and C7514/C7515 when it serializes wgmmas).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from dcpctl.runtime.attention import gluon_mla, triton_mla

LAYOUT = "NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)"
ALIGNED = {"Q", "KV", "BT", "LENS", "ROWREQ", "QPOS", "O", "LSE",
           "s_qn", "s_qh", "s_kvp", "s_kvs", "s_bt", "s_oc", "s_on", "s_oh"}


def _descs(block_n: int, tma: bool, gluon: bool) -> list[str]:
    lay = f",{LAYOUT}" if gluon else ""
    return ([f"tensordesc<bf16[{block_n},512]{lay}>", f"tensordesc<bf16[{block_n},64]{lay}>"] if tma
            else ["*bf16", "*bf16"])


def compile_kernel(kind: str, args: list[int], pdl: bool = False) -> tuple[str, int]:
    """-> (PTX, shared bytes) of one config (pdl: the Gluon kernel's programmatic-dependent-launch form)."""
    tail = ["*i32"] * 4 + ["*fp32", "*fp32"] + ["i32"] * 15
    if kind == "triton":
        bh, bn, warps, stages, tma = args
        fn, src_cls = triton_mla._mla_split_kernel, ASTSource
        types = ["*bf16", "*bf16", *_descs(bn, bool(tma), False), *tail, "fp32", "fp32"]
        const = dict(PAGE=64, D_V=512, D_PE=64, D_VP=512, D_PEP=64, BLOCK_H=bh, BLOCK_N=bn, IS_FP8=False,
                     USE_TMA=bool(tma), PREC="tf32", LAZY=False, WS=False)
        opts = dict(num_warps=warps, num_stages=stages)
    else:
        if not gluon_mla.gluon_available():
            _usage(f"the Gluon kernel needs Triton {gluon_mla.TESTED_TRITON}; this is {triton.__version__}")
        from triton.experimental.gluon._runtime import GluonASTSource
        bn, stages, tma = args
        fn, src_cls = gluon_mla._mla_gluon_kernel, GluonASTSource
        types = ["*bf16", "*bf16", *_descs(bn, bool(tma), True), *tail, "fp32"]
        const = dict(PAGE=64, D_V=512, D_PE=64, BLOCK_H=64, BLOCK_N=bn, STAGES=stages, USE_TMA=bool(tma),
                     PDL=pdl)
        opts = dict(num_warps=8)
    sig = dict(zip(fn.arg_names, types + ["constexpr"] * len(const)))
    attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names) if name in ALIGNED}
    ck = triton.compile(src_cls(fn=fn, signature=sig, constexprs=const, attrs=attrs),
                        target=GPUTarget("cuda", 90, 32), options=opts)
    return ck.asm["ptx"], ck.metadata.shared


def _usage(msg: str) -> None:
    print(msg.strip(), file=sys.stderr)
    sys.exit(2)


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in ("triton", "gluon") or \
            len(sys.argv) != {"triton": 7, "gluon": 5}[sys.argv[1]]:
        _usage(__doc__)
    ptx, shared = compile_kernel(sys.argv[1], [int(x) for x in sys.argv[2:]])
    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    with tempfile.TemporaryDirectory() as d:
        Path(d, "k.ptx").write_text(ptx)
        out = subprocess.run([str(ptxas), "-arch=sm_90a", "-v", os.path.join(d, "k.ptx"), "-o",
                              os.path.join(d, "k.cubin")], capture_output=True, text=True)
    print(f"{' '.join(sys.argv[1:])}: shared {shared} B")
    print("\n".join(line for line in (out.stdout + out.stderr).splitlines()
                    if "spill" in line or "Used" in line or "C751" in line))


if __name__ == "__main__":
    main()
