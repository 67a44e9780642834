"""What a model family's runtime builder receives (one value), and the lookup of that builder by import path.

plan/model_registry.py names, per family, a builder `module:function` taking a `ModelLoad` and an MLA-part
function `module:function` taking an HfConfig; `builder` and `mla_part` import them here (dcpctl/refs.py), in
the runtime, so that the registry itself stays torch-free.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from dcpctl.plan.hf_config import HfConfig
from dcpctl.refs import load_ref
from dcpctl.runtime.kernels.fusions import Fusions
from dcpctl.runtime.models.config import runtime_family
from dcpctl.runtime.parallel import ParallelState


@dataclass(frozen=True)
class ModelLoad:
    """One rank's load of one checkpoint, as loader.load_model was asked for it (its docstring says each
    field)."""

    parsed: HfConfig
    path: Path
    ps: ParallelState
    replicate_q: bool
    dtype: torch.dtype
    device: torch.device | str
    upcast: torch.dtype
    progress: Callable[[int, int], None] | None
    fuse: Fusions
    kda_max_requests: int | None
    keep_fp8: bool | None
    synthetic: int | None = None


def builder(hc: HfConfig) -> Callable[[ModelLoad], Any]:
    """The family's model builder; ModelLoadError when the bundled runtime runs no model of this family."""
    return load_ref(runtime_family(hc).build or "")


def mla_part(hc: HfConfig) -> Any:
    """The family's MlaConfig of `hc` (a hybrid's MLA layers); ModelLoadError as `builder`."""
    return load_ref(runtime_family(hc).mla_config or "")(hc)
