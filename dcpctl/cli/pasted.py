"""A pasted engine command line after `--` (`dcpctl plan -- vllm serve MODEL -tp 8 -dcp 8`): its plan
options."""
from __future__ import annotations

from typing import Any

from dcpctl import console
from dcpctl.plan.engines import TARGETS
from dcpctl.plan.errors import UserError


def split_args(args: tuple[str, ...]) -> tuple[dict[str, Any] | None, str | None]:
    """(options of a pasted engine line an engine target reads, or None; the saved plan path, or None)."""
    if not args:
        return None, None
    for t in TARGETS.values():
        n = len(t.command)
        if t.reads_pasted and tuple(args[:n]) == t.command:
            opts, rest = t.parse_pasted(list(args[n:]))
            if rest:
                console.info("passed through (not modelled by the plan): "
                             + " ".join(tok for p in rest for tok in p.tokens))
            typed = {"engine_args": [list(p.tokens) for p in rest]} if rest else {}
            return {**opts, **typed, "engine": t.name}, None
    if len(args) == 1:
        return None, args[0]
    lines = " or ".join(f"`{' '.join(t.command)} ...`" for t in TARGETS.values() if t.reads_pasted)
    raise UserError(f"expected a saved plan or a pasted {lines} line after `--`, got {' '.join(args[:3])!r}")
