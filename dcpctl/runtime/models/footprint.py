"""Bytes of weights a loaded model holds: every tensor reachable from its layers, each storage once.

    weight_bytes(model) -> int      what plan/weights.py predicts for this rank (tests compare the two)

Rope tables (Rotary), the parallel state and the config are not weights and are left out; views (the
stacked experts' per-expert views, w_kc slices) count their storage once.
"""
from __future__ import annotations

from typing import Any

import torch

from dcpctl.runtime.models.quant import Fp8Weight
from dcpctl.runtime.models.rope import Rotary

_SKIP = ("cfg", "ps", "shards", "rotary", "group", "router_group", "kda_pool")


def weight_bytes(model: Any) -> int:
    seen: dict[int, int] = {}
    _walk(model, seen, set())
    return sum(seen.values())


def _walk(obj: Any, seen: dict[int, int], visited: set[int]) -> None:
    if isinstance(obj, torch.Tensor):
        st = obj.untyped_storage()
        seen[st.data_ptr()] = st.nbytes()
        return
    if isinstance(obj, Fp8Weight):
        _walk(obj.w8, seen, visited)
        _walk(obj.scale, seen, visited)
        return
    if id(obj) in visited or isinstance(obj, (Rotary, str, bytes, int, float, bool, type(None))):
        return
    visited.add(id(obj))
    if isinstance(obj, dict):
        items = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        items = list(obj)
    elif hasattr(obj, "__dict__") and type(obj).__module__.startswith("dcpctl.runtime.models"):
        items = [v for k, v in vars(obj).items() if k not in _SKIP]
    else:
        return
    for item in items:
        _walk(item, seen, visited)
