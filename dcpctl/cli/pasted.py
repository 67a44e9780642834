"""A pasted engine command line after `--` (`dcpctl plan -- vllm serve MODEL -tp 8 -dcp 8`): its plan options."""
from __future__ import annotations

from typing import Any

from dcpctl import console
from dcpctl.plan.errors import UserError
from dcpctl.plan.vllm_args import parse_serve


def split_args(args: tuple[str, ...]) -> tuple[dict[str, Any] | None, str | None]:
    """(options of a pasted `vllm serve ...` line, or None; the saved plan path, or None)."""
    if not args:
        return None, None
    if tuple(args[:2]) == ("vllm", "serve"):
        opts, rest = parse_serve(list(args[2:]))
        if rest:
            console.info(f"passed through (not modelled by the plan): {' '.join(rest)}")
        return {**opts, "engine": "vllm"}, None
    if len(args) == 1:
        return None, args[0]
    raise UserError(f"expected a saved plan or a pasted `vllm serve ...` line after `--`, got {' '.join(args[:3])!r}")
