"""Which BLAS library torch's GEMMs take on NVIDIA GPUs: chosen once at model load, with a note.

    choose_blas(device)     $DCPCTL_BLAS: cublaslt (default) | cublas | keep (torch's own setting)
                            $DCPCTL_CUBLASLT_WORKSPACE: cuBLASLt's workspace in KiB (default 1) | torch

torch's `preferred_blas_library` is process-wide: it also applies to GEMMs outside the model in the same process.
Why cuBLASLt by default: on an H200 the CUDA-graph decode step of the issue-17 checkpoint (V3 attention, 4 dense
layers, bf16, ctx 1032) took -0.4% / -0.8% / -2.7% at batch 1 / 8 / 32 with it against cuBLAS in one run, and
+0.1% / -0.9% / -3.2% in another (benchmarks/fusion_ab.py; data h200_l2_prefetch_ab_s11.json, variant `lt`, and
h200_step_blas_ab_s11.json), from the o_proj and gate_up GEMMs at 32 rows (62.7 -> 58.7 us, 20.5 -> 17.6 us;
benchmarks/step_gemms.py, h200_step_gemms_s11.json), none of the seven linears timed slower by more than 2%.

Why a 1 KiB cuBLASLt workspace by default: with torch's workspace cuBLASLt takes split-K kernels for the decode
step's small-M GEMMs, each followed by a reduction launch (13 `splitKreduce` launches, 23.7 us a step at batch 8);
with 1 KiB it takes kernels that need none. On an H200 the CUDA-graph decode step of the issue-17 checkpoint took
0.652 / 0.692 / 0.788 ms at batch 1 / 8 / 32 against 0.674 / 0.715 / 0.788 with torch's workspace in one run
(benchmarks/fusion_ab.py, variant `lt1`, data h200_step_lt_workspace_s17.json). torch reads
$CUBLASLT_WORKSPACE_SIZE (KiB) once, at the process's first cuBLASLt GEMM: the loader sets it before the model's
first GEMM unless it is set already (then that value stands), and only with cuBLASLt chosen. A process that ran
a cuBLASLt GEMM before loading the model keeps the size it started with.
"""
from __future__ import annotations

import os

import torch

from dcpctl.runtime.models.errors import ModelLoadError
from dcpctl.runtime.notes import note_once

ENV = "DCPCTL_BLAS"
CHOICES = ("cublaslt", "cublas", "keep")
DEFAULT = "cublaslt"
WS_ENV = "DCPCTL_CUBLASLT_WORKSPACE"
TORCH_WS_ENV = "CUBLASLT_WORKSPACE_SIZE"   # torch's own variable, KiB
WS_DEFAULT = "1"


def blas_choice() -> str:
    v = os.environ.get(ENV, "").strip().lower() or DEFAULT
    if v not in CHOICES:
        raise ModelLoadError(f"${ENV}={os.environ[ENV]!r} is not one of {', '.join(CHOICES)}")
    return v


def lt_workspace_choice() -> str:
    """$DCPCTL_CUBLASLT_WORKSPACE: a positive number of KiB, or `torch` (torch's own size); default WS_DEFAULT."""
    v = os.environ.get(WS_ENV, "").strip().lower() or WS_DEFAULT
    if v != "torch" and not (v.isdigit() and int(v) > 0):
        raise ModelLoadError(f"${WS_ENV}={os.environ[WS_ENV]!r} is neither a positive number of KiB nor 'torch'")
    return v


def choose_lt_workspace() -> str:
    """Set torch's cuBLASLt workspace size for this process unless $CUBLASLT_WORKSPACE_SIZE is set already; returns
    the reason, for the note."""
    v = lt_workspace_choice()
    if os.environ.get(TORCH_WS_ENV):
        return f"workspace ${TORCH_WS_ENV}={os.environ[TORCH_WS_ENV]} KiB, as set"
    if v == "torch":
        return f"torch's own workspace (${WS_ENV}=torch)"
    os.environ[TORCH_WS_ENV] = v
    why = ("no split-K reductions in the decode step's small GEMMs; measured faster on an H200"
           if v == WS_DEFAULT and not os.environ.get(WS_ENV) else f"${WS_ENV}")
    return f"a {v} KiB workspace ({why})"


def choose_blas(device: torch.device | str) -> None:
    """Set torch's BLAS library for an NVIDIA GPU model (nothing on CPU or ROCm) and say so once; a value of
    $DCPCTL_BLAS not in CHOICES (or a bad $DCPCTL_CUBLASLT_WORKSPACE) is a ModelLoadError on every device."""
    v = blas_choice()
    lt_workspace_choice()
    if torch.device(device).type != "cuda" or torch.version.hip or v == "keep":
        return
    torch.backends.cuda.preferred_blas_library(v)
    why = ("the default: measured faster on the decode step's GEMMs on an H200" if v == DEFAULT and not
           os.environ.get(ENV) else f"${ENV}")
    ws = f", {choose_lt_workspace()}" if v == "cublaslt" else ""
    note_once(f"GEMMs: torch's {v} BLAS library for this process ({why}; ${ENV}=cublas|cublaslt|keep){ws}")
