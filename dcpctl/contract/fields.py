"""Frozen dataclasses from plain YAML/JSON values: every key checked once, the bad one named."""
from __future__ import annotations

import dataclasses
import types
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from dcpctl.plan.errors import UserError

T = TypeVar("T")


class LaunchConfigError(UserError):
    """A launch config key is missing, unknown or of the wrong type (one sentence naming the key)."""


def parse_section(cls: type[T], data: Any, where: str) -> T:
    """`cls(**data)` after checking every key against the dataclass fields and their types."""
    if not isinstance(data, dict):
        raise LaunchConfigError(f"launch config key {where or 'root'} must be a mapping, got {data!r}")
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    key = lambda name: f"{where}.{name}" if where else name  # noqa: E731
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise LaunchConfigError(f"launch config key {key(unknown[0])} is unknown; valid: {', '.join(names)}")
    hints = get_type_hints(cls)
    kw = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in data:
            kw[f.name] = parse_value(hints[f.name], data[f.name], key(f.name))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise LaunchConfigError(f"launch config has no {key(f.name)} (see `dcpctl launch --dry-run`)")
    return cls(**kw)


def parse_value(kind: Any, value: Any, where: str) -> Any:
    """One value of type `kind` (int, bool, str, Literal, X | None, tuple[X, ...], a dataclass)."""
    origin, args = get_origin(kind), get_args(kind)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return parse_value(inner, value, where)
    if origin is Literal:
        if value not in args:
            raise LaunchConfigError(f"launch config key {where} is {value!r}; valid: "
                                    f"{', '.join(map(str, args))}")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise LaunchConfigError(f"launch config key {where} must be a list, got {value!r}")
        return tuple(parse_value(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if dataclasses.is_dataclass(kind):
        return parse_section(kind, value, where)
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise LaunchConfigError(f"launch config key {where} must be an integer, got {value!r}")
    if kind in (bool, str) and not isinstance(value, kind):
        raise LaunchConfigError(f"launch config key {where} must be a {kind.__name__}, got {value!r}")
    return value


def plain(obj: Any) -> Any:
    """The YAML form of a section: dicts and lists, None-valued optional keys left out."""
    if dataclasses.is_dataclass(obj):
        return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if getattr(obj, f.name) is not None}
    if isinstance(obj, tuple):
        return [plain(v) for v in obj]
    return obj


def key_paths(cls: type, prefix: str = "") -> list[str]:
    """Every documented key of a section, dotted (docs/launch-config.md is checked against these)."""
    out = []
    for name, kind in get_type_hints(cls).items():
        inner = [a for a in get_args(kind) if a is not type(None)] or [kind]
        out.append(prefix + name)
        if dataclasses.is_dataclass(inner[0]):
            out += key_paths(inner[0], f"{prefix}{name}.")
    return out


__all__ = ["LaunchConfigError", "key_paths", "parse_section", "parse_value", "plain"]
