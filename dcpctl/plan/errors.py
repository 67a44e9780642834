"""Typed user errors and plan violations (each shows the equation: docs/design.md section 2)."""
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
    """A config.json that describes no model dcpctl knows (plan/hf_config.py); one sentence naming the
    file."""


def positive_ints(text: str, flag: str, noun: str = "integers") -> list[int]:
    """A comma-separated list of positive integers from a flag (`--batches 1,8,32`); UserError otherwise."""
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--{flag} must be comma-separated integers, got {text!r}") from None
    if not out or min(out) < 1:
        raise UserError(f"--{flag} needs positive {noun}, got {text!r}")
    return out
