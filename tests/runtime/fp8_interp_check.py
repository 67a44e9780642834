"""Run by test_fp8_gemm.py in a subprocess with TRITON_INTERPRET=1: the block-FP8 GEMM kernel on the CPU.

Checks the kernel (dense, K splits, grouped by expert with empty groups and rows past the last group)
against fp32 math on the dequantized operands; rows are quantized with torch on the CPU (the
interpreter's own e4m3 rounding differs from the GPU's), the GPU quantization kernel is checked by the
GPU tests."""
import sys

import torch
import triton.runtime.interpreter as ti

_patch = ti._patch_lang_tensor


def _patched(tensor, scope):  # numpy >= 2.4 refuses int() of a 1-element array, which the interpreter does
    _patch(tensor, scope)
    scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))


ti._patch_lang_tensor = _patched

from dcpctl.runtime.models.fp8_gemm import fp8_matmul, quantize_rows  # noqa: E402
from tests.runtime.test_model_fp8 import quantize, reference_dequant  # noqa: E402


def _ref_rows(x, b1):
    x8, s = quantize_rows(x, b1)
    return x8.float() * s[:, torch.arange(x.shape[1]) // b1]


def dense(R, N, K, block, sms):
    x, w = torch.randn(R, K), torch.randn(N, K)
    w8, s = quantize(w, block)
    got = fp8_matmul(x, w8, s, block, sms=sms)
    return got, _ref_rows(x, block[1]) @ reference_dequant(w8, s, block).T


def grouped(ends, N, K, block):
    E, R = len(ends), ends[-1] + 3   # three rows past the last group: other ranks' experts
    pairs = [quantize(torch.randn(N, K), block) for _ in range(E)]
    w8, s = torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])
    x = torch.randn(R, K)
    got = fp8_matmul(x, w8, s, block, ends=torch.tensor(ends, dtype=torch.int32))
    xr, ref, start = _ref_rows(x, block[1]), torch.zeros(R, N), 0
    for e, end in enumerate(ends):
        ref[start:end] = xr[start:end] @ reference_dequant(w8[e], s[e], block).T
        start = end
    return got, ref


def main() -> int:
    torch.manual_seed(0)
    cases = [dense(3, 40, 72, (16, 16), 132), dense(17, 70, 256, (128, 128), 4), dense(1, 64, 96, (32, 32), 132),
             dense(40, 24, 64, (8, 32), 1), grouped([2, 2, 5, 9], 48, 64, (16, 16))]
    worst = max(((g - r).abs().max() / r.abs().max()).item() for g, r in cases)
    print(f"worst relative error {worst:.2e}")
    return 0 if worst < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
