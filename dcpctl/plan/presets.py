"""Built-in presets (top-level presets/, shipped as dcpctl.presets): models, hardware, deployments."""
from __future__ import annotations

import functools
import importlib.resources
from typing import Any

import yaml

from dcpctl.plan.errors import UserError

Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: 10x faster

KINDS = ("models", "hardware", "deployments")


@functools.cache
def _files(kind: str) -> dict[str, Any]:
    root = importlib.resources.files("dcpctl.presets").joinpath(kind)
    return {f.name[:-5]: f for f in root.iterdir() if f.name.endswith(".yaml")}


@functools.cache
def _read(kind: str, name: str) -> dict[str, Any]:
    return yaml.load(_files(kind)[name].read_text(), Loader=Loader)


def _load_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {n: _read(kind, n) for n in names(kind)}


def names(kind: str) -> list[str]:
    return sorted(_files(kind))


def get(kind: str, name: str) -> dict[str, Any]:
    """One preset, parsing only its own file (plan's cold start stays short)."""
    if name not in _files(kind):
        label = {"models": "model preset", "hardware": "hardware profile", "deployments": "preset"}[kind]
        raise UserError(f"unknown {label} {name!r}; valid: {', '.join(names(kind))}")
    return _read(kind, name)


def hardware_profiles() -> dict[str, dict[str, Any]]:
    return {k: v["hardware"] for k, v in _load_kind("hardware").items()}


def find(name: str) -> tuple[str, dict[str, Any]]:
    """Look a name up in every kind (deployments first), for `dcpctl presets show`."""
    for kind in ("deployments", "models", "hardware"):
        if name in _load_kind(kind):
            return kind, _load_kind(kind)[name]
    every = [n for k in KINDS for n in names(k)]
    raise UserError(f"unknown preset {name!r}; valid: {', '.join(every)}")
