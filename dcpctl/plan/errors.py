"""Typed user errors and plan violations (STYLE 3: errors show the equation)."""
from __future__ import annotations

from dataclasses import dataclass


class UserError(Exception):
    """A mistake in the user's input: printed as one sentence, exit status 2."""


@dataclass(frozen=True)
class Violation:
    """One broken rule: a stable code, the equation with names and values, and the valid choices."""

    code: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


class ConfigError(UserError):
    """A config.json that describes no model dcpctl knows (plan/hf_config.py); one sentence naming the file."""
