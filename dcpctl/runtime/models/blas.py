"""Which BLAS library torch's GEMMs take on NVIDIA GPUs: chosen once at model load, with a note.

    choose_blas(device)     $DCPCTL_BLAS: cublaslt (default) | cublas | keep (torch's own setting)

torch's `preferred_blas_library` is process-wide: it also applies to GEMMs outside the model in the same process.
Why cuBLASLt by default: on an H200 the CUDA-graph decode step of the issue-17 checkpoint (V3 attention, 4 dense
layers, bf16, ctx 1032) took -0.4% / -0.8% / -2.7% at batch 1 / 8 / 32 with it against cuBLAS in one run, and
+0.1% / -0.9% / -3.2% in another (benchmarks/fusion_ab.py; data h200_l2_prefetch_ab_s11.json, variant `lt`, and
h200_step_blas_ab_s11.json), from the o_proj and gate_up GEMMs at 32 rows (62.7 -> 58.7 us, 20.5 -> 17.6 us;
benchmarks/step_gemms.py, h200_step_gemms_s11.json), none of the seven linears timed slower by more than 2%.
"""
from __future__ import annotations

import os

import torch

from dcpctl.runtime.models.errors import ModelLoadError
from dcpctl.runtime.notes import note_once

ENV = "DCPCTL_BLAS"
CHOICES = ("cublaslt", "cublas", "keep")
DEFAULT = "cublaslt"


def blas_choice() -> str:
    v = os.environ.get(ENV, "").strip().lower() or DEFAULT
    if v not in CHOICES:
        raise ModelLoadError(f"${ENV}={os.environ[ENV]!r} is not one of {', '.join(CHOICES)}")
    return v


def choose_blas(device: torch.device | str) -> None:
    """Set torch's BLAS library for an NVIDIA GPU model (nothing on CPU or ROCm) and say so once; a value of
    $DCPCTL_BLAS not in CHOICES is a ModelLoadError on every device."""
    v = blas_choice()
    if torch.device(device).type != "cuda" or torch.version.hip or v == "keep":
        return
    torch.backends.cuda.preferred_blas_library(v)
    why = ("the default: measured faster on the decode step's GEMMs on an H200" if v == DEFAULT and not
           os.environ.get(ENV) else f"${ENV}")
    note_once(f"GEMMs: torch's {v} BLAS library for this process ({why}; ${ENV}=cublas|cublaslt|keep)")
