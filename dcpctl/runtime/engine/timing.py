"""Seconds spent in the DCP exchange (query all-gather and merge collectives), for /metrics.

The exchange functions live in dcpctl.runtime.attention.dcp; `ExchangeTimer.install()` wraps the
names that DCPContext.attend calls there (once per process, only when serving) and sums wall time.
On CUDA the wrapper synchronizes so the time is the collective's, not its launch.
"""
from __future__ import annotations

import functools
import threading
import time
from typing import Any, Callable

import torch

from dcpctl.runtime.attention import dcp as _dcp

EXCHANGE_FUNCTIONS = ("gather_heads", "exchange_ag_rs", "exchange_a2a")


class ExchangeTimer:
    def __init__(self) -> None:
        self.seconds = 0.0
        self._lock = threading.Lock()

    def _wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            out = fn(*args, **kwargs)
            if isinstance(out, torch.Tensor) and out.is_cuda:
                torch.cuda.synchronize(out.device)
            with self._lock:
                self.seconds += time.perf_counter() - t0
            return out
        timed.__dcpctl_timed__ = True  # type: ignore[attr-defined]
        return timed

    def install(self) -> "ExchangeTimer":
        for name in EXCHANGE_FUNCTIONS:
            fn = getattr(_dcp, name, None)
            if fn is not None and not getattr(fn, "__dcpctl_timed__", False):
                setattr(_dcp, name, self._wrap(fn))
        return self
