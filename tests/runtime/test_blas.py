"""models/blas.py: torch's BLAS library for a CUDA model, from $DCPCTL_BLAS (default cuBLASLt), said once."""
from __future__ import annotations

import pytest
import torch

from dcpctl.runtime.models import blas
from dcpctl.runtime.models.errors import ModelLoadError


@pytest.mark.parametrize("value,want", [(None, "cublaslt"), ("", "cublaslt"), (" cuBLAS ", "cublas"),
                                        ("keep", "keep"), ("cublaslt", "cublaslt")])
def test_choice_from_the_environment(monkeypatch, value, want):
    if value is None:
        monkeypatch.delenv(blas.ENV, raising=False)
    else:
        monkeypatch.setenv(blas.ENV, value)
    assert blas.blas_choice() == want


def test_an_unknown_library_is_a_load_error_on_every_device(monkeypatch):
    monkeypatch.setenv(blas.ENV, "rocblas")
    with pytest.raises(ModelLoadError, match=r"\$DCPCTL_BLAS='rocblas' is not one of cublaslt, cublas, keep"):
        blas.choose_blas("cpu")


def test_cpu_models_leave_torch_alone(monkeypatch):
    before = torch.backends.cuda.preferred_blas_library()
    monkeypatch.setenv(blas.ENV, "cublas" if "Cublaslt" in str(before) else "cublaslt")   # not torch's setting
    blas.choose_blas(torch.device("cpu"))
    assert torch.backends.cuda.preferred_blas_library() == before


def test_a_bad_value_stops_the_load_before_any_file_is_read(monkeypatch, tmp_path):
    from dcpctl.runtime.models import load_model
    from dcpctl.runtime.parallel import ParallelState
    monkeypatch.setenv(blas.ENV, "fast")
    with pytest.raises(ModelLoadError, match="DCPCTL_BLAS"):
        load_model(tmp_path / "missing", ParallelState.single(), False, torch.float32)
