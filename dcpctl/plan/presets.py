"""Built-in presets (top-level presets/, shipped as dcpctl.presets): models, hardware, deployments."""
from __future__ import annotations

import functools
import importlib.resources
from typing import Any

import yaml

Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: 10x faster

from dcpctl.plan.errors import UserError

KINDS = ("models", "hardware", "deployments")


@functools.cache
def _load_kind(kind: str) -> dict[str, dict[str, Any]]:
    root = importlib.resources.files("dcpctl.presets").joinpath(kind)
    out: dict[str, dict[str, Any]] = {}
    for f in sorted(root.iterdir(), key=lambda p: p.name):
        if f.name.endswith(".yaml"):
            out[f.name[:-5]] = yaml.load(f.read_text(), Loader=Loader)
    return out


def names(kind: str) -> list[str]:
    return sorted(_load_kind(kind))


def get(kind: str, name: str) -> dict[str, Any]:
    table = _load_kind(kind)
    if name not in table:
        label = {"models": "model preset", "hardware": "hardware profile", "deployments": "preset"}[kind]
        raise UserError(f"unknown {label} {name!r}; valid: {', '.join(sorted(table))}")
    return table[name]


def hardware_profiles() -> dict[str, dict[str, Any]]:
    return {k: v["hardware"] for k, v in _load_kind("hardware").items()}


def find(name: str) -> tuple[str, dict[str, Any]]:
    """Look a name up in every kind (deployments first), for `dcpctl presets show`."""
    for kind in ("deployments", "models", "hardware"):
        if name in _load_kind(kind):
            return kind, _load_kind(kind)[name]
    every = [n for k in KINDS for n in names(k)]
    raise UserError(f"unknown preset {name!r}; valid: {', '.join(every)}")
