"""Rows a decode GEMM runs at: M padded up where cuBLAS's kernel for more rows is faster (the `gemm_rows` fusion).

    rows_for(m, w) -> int      m, or the row count TABLE gives this weight's shape on the GPU it was measured on

cuBLASLt picks its kernel by M and the choice is not monotonic: on an H200 the V3 o_proj (7168 x 16384, bf16)
took 64.9 us at 8 rows (a split-K kernel and its reduction) and 58.7 us at 32 (eleventh session,
benchmarks/data/h200_step_gemms_s11.json).  The producer writes its T rows into a buffer of rows_for(T) rows
(attention's w_vc bmm writes the o_proj input), so the padding costs no kernel; rows past T hold whatever the
buffer held and their outputs are dropped (a GEMM's output row depends on its own input row only).  Not bit-equal
to the unpadded GEMM (another kernel sums K in another order), so graph and eager steps both run it.
Only for plain bf16/fp16 weights under cuBLASLt on the GPU named in MEASURED_ON; elsewhere rows_for(m) = m.
"""
from __future__ import annotations

import functools

import torch
from torch import Tensor

MEASURED_ON = "NVIDIA H200"
# (N out, K in): ((lo, hi, rows), ...): M in [lo, hi] runs as `rows` (benchmarks/gemm_rows_sweep.py)
TABLE: dict[tuple[int, int], tuple[tuple[int, int, int], ...]] = {
    (7168, 16384): ((2, 31, 32),),
}


@functools.lru_cache(maxsize=None)
def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device)


def padded(m: int, shape: tuple[int, int], cublaslt: bool, device_name: str) -> int:
    """TABLE's row count for M rows of an [N, K] weight (m where TABLE has none, off cuBLASLt or MEASURED_ON)."""
    if not cublaslt or device_name != MEASURED_ON:
        return m
    return next((rows for lo, hi, rows in TABLE.get(shape, ()) if lo <= m <= hi), m)


def rows_for(m: int, w: Tensor) -> int:
    if not isinstance(w, Tensor) or not w.is_cuda or w.dim() != 2 or w.dtype not in (torch.bfloat16, torch.float16):
        return m
    if tuple(w.shape) not in TABLE:
        return m
    lt = "lt" in str(torch.backends.cuda.preferred_blas_library()).lower()
    return padded(m, tuple(w.shape), lt, _device_name(w.device))
