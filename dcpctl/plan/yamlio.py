"""Reading user files (YAML, JSON text) with errors that name the file and line."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dcpctl.plan.errors import UserError

Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: 10x faster


def read_user_text(path: Path, expected: str) -> str:
    """A user's text file; unreadable or non-UTF-8 content is a UserError naming it."""
    try:
        return path.read_text()
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path} is not a text file (not UTF-8): expected {expected}") from None


def read_yaml(path: Path) -> dict[str, Any]:
    text = read_user_text(path, "YAML")
    try:
        data = yaml.load(text, Loader=Loader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise UserError(f"{path} is not valid YAML{where}: {problem}") from None
    if data is None:
        raise UserError(f"{path} is empty: expected a YAML mapping")
    if not isinstance(data, dict):
        raise UserError(f"{path} must hold a YAML mapping, not {type(data).__name__}")
    return data
