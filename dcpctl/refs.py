"""Objects named by import path (`package.module:name`), imported on first use: how a torch-free registry
names code of a layer below or beside it (plan/model_registry.py's runtime builders, plan/engine_target.py's
exporters)."""
from __future__ import annotations

import importlib
from typing import Any


def load_ref(ref: str) -> Any:
    """`package.module:name` -> the object."""
    module, sep, name = ref.partition(":")
    if not sep or not name:
        raise ValueError(f"an import path is `package.module:name`, got {ref!r}")
    return getattr(importlib.import_module(module), name)
