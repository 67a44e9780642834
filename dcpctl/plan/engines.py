"""The engine targets dcpctl plans for, registered once: `--engine NAME` picks one (plan/engine_target.py).

A third engine is its target module plus one line of TARGETS (docs/structure.md: Adding an engine target).
"""
from __future__ import annotations

from typing import Any

from dcpctl.plan.engine_target import EngineTarget
from dcpctl.plan.errors import UserError
from dcpctl.plan.sglang_target import SglangTarget
from dcpctl.plan.vllm_target import VllmTarget

TARGETS: dict[str, EngineTarget] = {t.name: t for t in (SglangTarget(), VllmTarget())}
DEFAULT = "sglang"  # plan/request.py PlanRequest.engine's default


def target(name: str | None) -> EngineTarget:
    """The target of `--engine NAME` (None: the default); an unknown name is one sentence listing them."""
    t = TARGETS.get(name or DEFAULT)
    if t is None:
        raise UserError(f"--engine {name} is not an engine dcpctl plans for; valid: {', '.join(TARGETS)}")
    return t


def engine_options(opts: dict[str, Any]) -> dict[str, Any]:
    """Merged plan options -> the options the request is built from, under the engine they name (another
    engine's spellings are refused by that engine, in one sentence)."""
    chosen = target(opts.get("engine"))
    for other in TARGETS.values():
        if other is not chosen:
            other.refuse_names(opts, chosen)
    return chosen.options(opts)


def all_option_keys() -> tuple[str, ...]:
    """The plan option keys every target's own CLI options set (a saved plan's request may hold them)."""
    return tuple(dict.fromkeys(k for t in TARGETS.values() for k in t.option_keys))


def all_backend_names() -> tuple[str, ...]:
    """Every target's --attention-backend names, in registration order (the flag's choices)."""
    return tuple(dict.fromkeys(n for t in TARGETS.values() for n in t.attention_backends))
