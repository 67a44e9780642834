"""The bundled runtime's numerics and speed settings: each decided once here, with its reason, from flags
only.

| decision           | values                             | default and why                                  |
| ------------------ | ---------------------------------- | ------------------------------------------------ |
| fp8_gemm           | auto, w8a16, w8a8                  | auto: w8a8 for prefill rows (e4m3 MMA, as the    |
|                    |                                    | engines), w8a16 for decode's (weight-read bound) |
| blas               | cublaslt, cublas, keep             | cublaslt: faster on the decode step's small      |
|                    |                                    | GEMMs                                            |
| cublaslt_workspace | torch, or a positive number of KiB | torch: a small workspace slows prefill GEMMs     |
|                    |                                    | that split K                                     |
| dist_timeout       | seconds                            | 600: long enough for a first CUDA graph capture  |

The launch config carries the values (its `runtime` section); the runtime follows them.  The defaults live
here.
"""
from __future__ import annotations

from typing import Any

FP8_GEMM_CHOICES = ("auto", "w8a16", "w8a8")
BLAS_CHOICES = ("cublaslt", "cublas", "keep")
DEFAULT_FP8_GEMM = "auto"
DEFAULT_BLAS = "cublaslt"
DEFAULT_DIST_TIMEOUT_S = 600


def fp8_gemm(requested: str | None, quantization: str | None) -> tuple[str, str]:
    if requested:
        return requested, f"set by --fp8-gemm {requested}"
    what = (f"the default for {quantization} weights"
            if quantization else "unused (no FP8 weights), the default")
    return DEFAULT_FP8_GEMM, what + (
        ": GEMMs of prefill rows quantize their activations 1x128 to e4m3 (w8a8, as SGLang and vLLM serve "
        "DeepSeek's block-FP8 releases) for the e4m3 MMA's rate; decode's few rows keep 16-bit activations "
        "(w8a16), where the weight read is the cost, unless the GPU's measured table says otherwise "
        "(--fp8-gemm w8a16|w8a8: one method for every GEMM)")


def blas(requested: str | None, device: str) -> tuple[str, str]:
    if requested:
        return requested, f"set by --blas {requested}"
    if device != "cuda":
        return DEFAULT_BLAS, f"{device}: no effect (torch's BLAS choice applies to NVIDIA GPUs only)"
    return DEFAULT_BLAS, ("the default: measured faster than cuBLAS on the decode step's GEMMs on an H200 "
                          "(--blas cublas|keep to change)")


def cublaslt_workspace(kib: int | None, blas_value: str) -> tuple[int | None, str]:
    if kib is not None:
        return kib, f"set by --cublaslt-workspace-kib {kib}" + ("" if blas_value == "cublaslt" else
                                                                 f" (unused: --blas {blas_value})")
    return None, ("torch's own size: a small workspace speeds the decode step but slows prefill GEMMs that "
                  "split K (--cublaslt-workspace-kib N to choose one)")


def dist_timeout(seconds: int | None) -> tuple[int, str]:
    if seconds is not None:
        return seconds, f"set by --dist-timeout {seconds}"
    return DEFAULT_DIST_TIMEOUT_S, ("the default: a collective that waits longer fails the run (first CUDA "
                                    "graph captures and kernel builds fit inside it)")


def table_override(flag: str, path: str | None) -> tuple[str | None, str]:
    if path:
        return path, f"set by {flag}: this file's entries replace the shipped table's"
    return None, "the shipped table"


def decide(req: Any) -> dict[str, tuple[Any, str]]:
    """(value, reason) per runtime setting of a PlanRequest."""
    b = blas(req.blas, req.hardware.device)
    return {
        "fp8_gemm": fp8_gemm(req.fp8_gemm, req.model.quantization),
        "blas": b,
        "cublaslt_workspace_kib": cublaslt_workspace(req.cublaslt_workspace_kib, b[0]),
        "dist_timeout": dist_timeout(req.dist_timeout),
        "attention_table": table_override("--attention-table", req.attention_table),
        "mla_configs": table_override("--mla-configs", req.mla_configs),
        "gemm16_table": table_override("--gemm16-table", req.gemm16_table),
    }
