"""Engine: request state, scheduler (KV policy), sampling adapter, continuous-batching loop.

The names below load on first use (PEP 562), so importing a torch-free module of this package (events,
request) from an HTTP worker process does not import the engine, the models and torch with it.
"""
from __future__ import annotations

import importlib
from typing import Any

_HOME = {"Engine": "engine", "SamplingParams": "request", "Sequence": "request", "Scheduler": "scheduler",
         "SchedulerError": "scheduler"}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
