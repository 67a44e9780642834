"""kernels/blas.py: torch's BLAS library for a CUDA model, from the launch config's runtime.blas, said
once."""
from __future__ import annotations

import os

import pytest
import torch

from dcpctl.contract.fields import LaunchConfigError
from dcpctl.contract.launch_config import RuntimeSection
from dcpctl.runtime import settings
from dcpctl.runtime.kernels import blas


def test_the_default_is_cublaslt_with_torchs_workspace():
    assert settings.current() == RuntimeSection()
    assert (RuntimeSection().blas, RuntimeSection().cublaslt_workspace_kib) == ("cublaslt", None)


def test_cpu_models_leave_torch_alone():
    before = torch.backends.cuda.preferred_blas_library()
    with settings.using(blas="cublas" if "Cublaslt" in str(before) else "cublaslt"):   # not torch's setting
        blas.choose_blas(torch.device("cpu"))
    assert torch.backends.cuda.preferred_blas_library() == before


@pytest.mark.parametrize("bad", [0, -4])
def test_a_bad_workspace_is_refused_where_the_config_is_parsed(bad):
    with pytest.raises(LaunchConfigError, match="runtime.cublaslt_workspace_kib must be >= 1"):
        RuntimeSection(cublaslt_workspace_kib=bad)


def _ws_env(monkeypatch, torchs):
    monkeypatch.setattr(blas, "_OURS", set())
    monkeypatch.setenv(blas.TORCH_WS_ENV, "x")   # recorded, so what choose_lt_workspace sets is undone after
                                                 # the test
    if torchs is None:
        monkeypatch.delenv(blas.TORCH_WS_ENV)
    else:
        monkeypatch.setenv(blas.TORCH_WS_ENV, torchs)


@pytest.mark.parametrize("ours,torchs,want_env,said", [
    (None, None, None, "torch's own workspace"),                # the default leaves it to torch
    (64, None, "64", "a 64 KiB workspace (--cublaslt-workspace-kib)"),       # sets torch's variable
    (None, "32768", "32768", "CUBLASLT_WORKSPACE_SIZE=32768 KiB, as set"),   # the user's own value stands
])
def test_the_cublaslt_workspace(monkeypatch, ours, torchs, want_env, said):
    _ws_env(monkeypatch, torchs)
    with settings.using(cublaslt_workspace_kib=ours):
        assert said in blas.choose_lt_workspace()
    assert os.environ.get(blas.TORCH_WS_ENV) == want_env


def test_a_second_load_says_the_same(monkeypatch):
    # the variable this module set is not the user's: a second model in the process is told the same reason
    _ws_env(monkeypatch, None)
    with settings.using(cublaslt_workspace_kib=1):
        first = blas.choose_lt_workspace()
        assert blas.choose_lt_workspace() == first == "a 1 KiB workspace (--cublaslt-workspace-kib)"
    assert "torch's own" in blas.choose_lt_workspace()       # then torch's own again: the variable goes
    assert blas.TORCH_WS_ENV not in os.environ
