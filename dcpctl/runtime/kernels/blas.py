"""Which BLAS library torch's GEMMs take on NVIDIA GPUs: the launch config's runtime.blas, set once at model
load.

    choose_blas(device)     runtime.blas: cublaslt (default) | cublas | keep (torch's own setting)
                            runtime.cublaslt_workspace_kib: cuBLASLt's workspace in KiB | None (torch's own
                            size)

torch's `preferred_blas_library` is process-wide: it also applies to GEMMs outside the model in the same
process. With torch's workspace cuBLASLt runs small-M GEMMs as split-K kernels, each followed by a reduction
launch; a 1 KiB workspace takes kernels that need none (faster decode steps, slower prefill GEMMs, where
split-K pays). torch reads $CUBLASLT_WORKSPACE_SIZE (KiB) when it sizes a workspace: the loader sets it before
the model's first GEMM, unless it is set already (then that value stands), and only with cuBLASLt chosen.
"""
from __future__ import annotations

import torch

from dcpctl import knobs
from dcpctl.runtime import settings
from dcpctl.runtime.notes import note_once

TORCH_WS_ENV = "CUBLASLT_WORKSPACE_SIZE"   # torch's own variable, KiB
_OURS: set[str] = set()      # values of $CUBLASLT_WORKSPACE_SIZE this module set


def choose_lt_workspace() -> str:
    """Set torch's cuBLASLt workspace size for this process unless $CUBLASLT_WORKSPACE_SIZE is set already;
    returns the reason, for the note."""
    kib = settings.current().cublaslt_workspace_kib
    have = str(knobs.get(TORCH_WS_ENV) or "")
    if have and have not in _OURS:
        return f"workspace ${TORCH_WS_ENV}={have} KiB, as set"
    if kib is None:
        if have:                           # ours, from an earlier load with another choice
            knobs.drop(TORCH_WS_ENV)
        return "torch's own workspace (--cublaslt-workspace-kib N to choose one)"
    knobs.put(TORCH_WS_ENV, str(kib))
    _OURS.add(str(kib))
    return f"a {kib} KiB workspace (--cublaslt-workspace-kib)"


def choose_blas(device: torch.device | str) -> None:
    """Set torch's BLAS library for an NVIDIA GPU model (nothing on CPU or ROCm) and say so once."""
    v = settings.current().blas
    if torch.device(device).type != "cuda" or torch.version.hip or v == "keep":
        return
    torch.backends.cuda.preferred_blas_library(v)
    ws = f", {choose_lt_workspace()}" if v == "cublaslt" else ""
    note_once(f"GEMMs: torch's {v} BLAS library for this process (launch config runtime.blas; --blas "
              f"cublas|cublaslt|keep){ws}")
