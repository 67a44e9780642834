"""Which BLAS library torch's GEMMs take on NVIDIA GPUs: chosen once at model load, with a note.

    choose_blas(device)     $DCPCTL_BLAS: cublaslt (default) | cublas | keep (torch's own setting)
                            $DCPCTL_CUBLASLT_WORKSPACE: cuBLASLt's workspace in KiB | torch (default)

torch's `preferred_blas_library` is process-wide: it also applies to GEMMs outside the model in the same process.
Why cuBLASLt by default: on an H200 the CUDA-graph decode step of the issue-17 checkpoint (V3 attention, 4 dense
layers, bf16, ctx 1032) took -0.4% / -0.8% / -2.7% at batch 1 / 8 / 32 with it against cuBLAS in one run, and
+0.1% / -0.9% / -3.2% in another (benchmarks/fusion_ab.py; data h200_l2_prefetch_ab_s11.json, variant `lt`, and
h200_step_blas_ab_s11.json), from the o_proj and gate_up GEMMs at 32 rows (62.7 -> 58.7 us, 20.5 -> 17.6 us;
benchmarks/step_gemms.py, h200_step_gemms_s11.json), none of the seven linears timed slower by more than 2%.

$DCPCTL_CUBLASLT_WORKSPACE (KiB) is an opt-in trade, not the default. With torch's workspace cuBLASLt runs the
decode step's small-M GEMMs as split-K kernels, each followed by a reduction launch (13 `splitKreduce` launches,
23.7 us a step at batch 8 on an H200); with 1 KiB it takes kernels that need none. On an H200 the CUDA-graph step
of the issue-17 checkpoint took 0.642 / 0.678 / 0.773 ms at batch 1 / 8 / 32 with 1 KiB against 0.680 / 0.722 /
0.774 with torch's workspace (benchmarks/fusion_ab.py, one process per setting, twice;
h200_step_lt_workspace_s17_processes.json), but the bf16 prefill of 128 tokens took 6.12 ms against 4.97 (each its
own process, another machine; benchmarks/fp8_prefill.py, h200_prefill_lt_workspace_s17_*.json): at 128 rows
split-K pays.
torch reads $CUBLASLT_WORKSPACE_SIZE (KiB) when it sizes a workspace: the loader sets it before the model's first
GEMM, unless it is set already (then that value stands), and only with cuBLASLt chosen.
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
WS_DEFAULT = "torch"
_OURS: set[str] = set()      # values of $CUBLASLT_WORKSPACE_SIZE this module set


def blas_choice() -> str:
    v = os.environ.get(ENV, "").strip().lower() or DEFAULT
    if v not in CHOICES:
        raise ModelLoadError(f"${ENV}={os.environ[ENV]!r} is not one of {', '.join(CHOICES)}")
    return v


def lt_workspace_choice() -> str:
    """$DCPCTL_CUBLASLT_WORKSPACE: a positive number of KiB, or `torch` (torch's own size, the default)."""
    v = os.environ.get(WS_ENV, "").strip().lower() or WS_DEFAULT
    if v != "torch" and not (v.isdigit() and int(v) > 0):
        raise ModelLoadError(f"${WS_ENV}={os.environ[WS_ENV]!r} is neither a positive number of KiB nor 'torch'")
    return v


def choose_lt_workspace() -> str:
    """Set torch's cuBLASLt workspace size for this process unless $CUBLASLT_WORKSPACE_SIZE is set already; returns
    the reason, for the note."""
    v = lt_workspace_choice()
    have = os.environ.get(TORCH_WS_ENV)
    if have and have not in _OURS:
        return f"workspace ${TORCH_WS_ENV}={have} KiB, as set"
    if v == "torch":
        if have:                           # ours, from an earlier load with another choice
            os.environ.pop(TORCH_WS_ENV)
        return f"torch's own workspace (${WS_ENV}=KiB to choose one)"
    os.environ[TORCH_WS_ENV] = v
    _OURS.add(v)
    return f"a {v} KiB workspace (${WS_ENV})"


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
