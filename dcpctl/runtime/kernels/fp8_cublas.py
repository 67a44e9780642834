"""Block-FP8 GEMMs through cuBLAS's block-scaled FP8 GEMM (torch's scaled_mm, DeepSeek's recipe): w8a8.

    CUBLAS: the kernel choice (fp8_tiles.choose) that runs cublas_matmul
    usable(N, K, block, device) -> bool       whether a GEMM of this shape takes it here (probed once a GPU)
    probe(device) -> (ok, why)                 one small GEMM against its float64 product, said once at load
    cublas_matmul(x, w8, scale) -> [R, N]      in x's dtype

The rows are quantized as the Triton kernels' w8a8 quantizes them (fp8_parts.quantize_rows_gpu: 1 x 128 e4m3,
`s = amax / 448`, one launch), with their factors laid out K block by K block and the rows padded to a
multiple of 4 (cuBLASLt's layout for 1x128 factors); the weight's 128x128 factors are read as stored. cuBLAS
(12.9 and newer, sm_90) applies both factors per K block inside its FP8 MMA loop, with fp32 accumulation:
the same arithmetic as the w8a8 Triton kernel but for the order of the fp32 sums. Prefill's rows make these
GEMMs compute-bound, where cuBLAS's e4m3 MMA runs at about twice the bf16 rate; at decode's few rows the
Triton kernels (fp8_gemm.py) read the weight faster. The choice per shape and row count: fp8_tiles.method.
Graph-safe (no host sync; buffers sized by the shapes).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import Tensor

from dcpctl.runtime.kernels.fp8_dequant import dequantize_gpu
from dcpctl.runtime.kernels.fp8_parts import quantize_rows_gpu

ROW_PAD = 4      # rows a multiple of this (cuBLASLt's 1x128 factor layout)
K_BLOCKS = 4     # K blocks a multiple of this: the weight's factors are read as stored, unpadded


@dataclass(frozen=True)
class CublasW8a8:
    """Quantize the rows (one launch), then cuBLAS's block-scaled FP8 GEMM."""


CUBLAS = CublasW8a8()


def _call(x8: Tensor, w8: Tensor, xs: Tensor, ws: Tensor, dtype: torch.dtype) -> Tensor:
    # x8 [RP, K] e4m3, w8 [N, K] e4m3, xs [RP, K/128] (strides (1, RP)), ws [N/128, K/128] -> [RP, N]
    import torch.nn.functional as F
    if hasattr(F, "scaled_mm"):
        return F.scaled_mm(x8, w8.t(), xs, F.ScalingType.BlockWise1x128, ws.t(),
                           F.ScalingType.BlockWise128x128, output_dtype=dtype)
    return torch._scaled_mm(x8, w8.t(), scale_a=xs, scale_b=ws.t(), out_dtype=dtype)


def cublas_matmul(x: Tensor, w8: Tensor, scale: Tensor) -> Tensor:
    """x [R, K] 16/32-bit @ W^T for a block-FP8 W (w8 [N, K] e4m3, scale [N/128, K/128] fp32) -> [R, N]."""
    R = x.shape[0]
    x8, xs = quantize_rows_gpu(x.contiguous(), 128, pad=ROW_PAD, k_major=True)
    out = _call(x8, w8, xs, scale if scale.is_contiguous() else scale.contiguous(), x.dtype)
    return out if out.shape[0] == R else out[:R]


def shape_ok(N: int, K: int, block: tuple[int, int]) -> bool:
    """Whether cuBLAS's recipe takes this weight as stored: 128x128 blocks, K a whole number of 4 blocks, N a
    multiple of 16 (FP8 operands' 16-byte alignment)."""
    return tuple(block) == (128, 128) and K % (128 * K_BLOCKS) == 0 and N % 16 == 0


def usable(N: int, K: int, block: tuple[int, int], device: object) -> bool:
    return getattr(device, "type", None) == "cuda" and shape_ok(N, K, block) and probe(str(device))[0]


def probe(device: str) -> tuple[bool, str]:
    """(ok, why): one GEMM of 8 x 256 x 512 through cublas_matmul against its float64 product (the same
    quantized rows and weight), once per GPU ("cuda" is the current one): the load's note runs it, before any
    CUDA graph capture; refused or wrong, the Triton kernels take every GEMM."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return False, f"{dev.type}: no cuBLAS"
    return _probe(dev.index if dev.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _probe(index: int) -> tuple[bool, str]:
    dev = torch.device("cuda", index)
    from dcpctl.runtime.gpu import gpu_facts
    sm = gpu_facts(dev).sm
    if sm[0] != 9:
        return False, f"sm_{sm[0]}{sm[1]}: torch runs the 1x128 x 128x128 recipe on sm_90 only"
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(8, 512, generator=g).to(dev, torch.bfloat16)
    w8 = (torch.randn(256, 512, generator=g) * 100).clamp(-448, 448).to(torch.float8_e4m3fn).to(dev)
    ws = (torch.rand(2, 4, generator=g) * 1e-3 + 1e-4).to(dev)
    try:
        out = cublas_matmul(x, w8, ws).double()
    except Exception as e:  # noqa: BLE001 - a torch or cuBLAS that refuses the recipe leaves the Triton kernels
        return False, (f"torch {torch.__version__} refuses cuBLAS's block-scaled FP8 GEMM here "
                       f"({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})")
    x8, xs = quantize_rows_gpu(x, 128)
    xq = x8.double() * xs.double().repeat_interleave(128, 1)
    ref = xq @ dequantize_gpu(w8, ws, (128, 128), torch.float32).double().T
    err = ((out - ref).norm() / ref.norm()).item()
    if not err < 1e-2:
        return False, (f"cuBLAS's block-scaled FP8 GEMM is {err:.3g} norm-relative off its float64 product "
                       "here")
    return True, f"cuBLAS's block-scaled FP8 GEMM (torch {torch.__version__}) checked against float64"
