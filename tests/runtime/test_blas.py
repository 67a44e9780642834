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


def _ws_env(monkeypatch, ours, torchs):
    monkeypatch.setattr(blas, "_OURS", set())
    for k, v in ((blas.WS_ENV, ours), (blas.TORCH_WS_ENV, torchs)):
        monkeypatch.setenv(k, "x")   # recorded, so what choose_lt_workspace sets is undone after the test
        if v is None:
            monkeypatch.delenv(k)
        else:
            monkeypatch.setenv(k, v)


@pytest.mark.parametrize("ours,torchs,want_env,said", [
    (None, None, None, "torch's own workspace"),                # the default leaves it to torch
    ("torch", None, None, "torch's own workspace"),
    ("64", None, "64", "a 64 KiB workspace ($DCPCTL_CUBLASLT_WORKSPACE)"),   # sets torch's variable
    (None, "32768", "32768", "CUBLASLT_WORKSPACE_SIZE=32768 KiB, as set"),   # the user's own value stands
])
def test_the_cublaslt_workspace(monkeypatch, ours, torchs, want_env, said):
    _ws_env(monkeypatch, ours, torchs)
    assert said in blas.choose_lt_workspace()
    import os
    assert os.environ.get(blas.TORCH_WS_ENV) == want_env


@pytest.mark.parametrize("bad", ["0", "-4", "big", "1.5"])
def test_a_bad_workspace_is_a_load_error_on_every_device(monkeypatch, bad):
    _ws_env(monkeypatch, bad, None)
    with pytest.raises(ModelLoadError, match=r"\$DCPCTL_CUBLASLT_WORKSPACE=.* is neither a positive number of KiB"):
        blas.choose_blas("cpu")


def test_a_second_load_says_the_same(monkeypatch):
    # the variable this module set is not the user's: a second model in the process is told the same reason
    _ws_env(monkeypatch, "1", None)
    first = blas.choose_lt_workspace()
    assert blas.choose_lt_workspace() == first == "a 1 KiB workspace ($DCPCTL_CUBLASLT_WORKSPACE)"
    monkeypatch.setenv(blas.WS_ENV, "torch")           # then torch's own again: the variable goes
    assert "torch's own" in blas.choose_lt_workspace()
    import os
    assert blas.TORCH_WS_ENV not in os.environ
