"""Every flag of an engine's server on a dcpctl command: `cls=EngineCommand` (plan, export, recommend).

Before click parses, the engine target the command line names (`--engine NAME`, else the default; the
FORMAT of `dcpctl export NAME` when NAME is an engine) splits it (plan/engine_target.py `split_flags`): a
pasted launcher (`-- sglang serve ...`) is unwrapped; an engine flag that dcpctl has under another
spelling is renamed to dcpctl's; every other engine flag is checked and kept as typed in
`ctx.meta["engine_args"]`, for the plan to list and `export` to carry. An unknown flag is one sentence
naming the nearest engine flag.
"""
from __future__ import annotations

from typing import Any

import click

from dcpctl import console
from dcpctl.plan.engine_args import PassThrough
from dcpctl.plan.engine_target import EngineTarget
from dcpctl.plan.engines import TARGETS, target


class EngineCommand(click.Command):
    format_names_engine = False  # `dcpctl export NAME`: an engine's own format implies --engine NAME

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if self.format_names_engine:
            args = _engine_of_format(args, _caller_flags(self, ctx))
        engine = named_target(args)
        mine, rest, pasted = engine.split_flags(list(args), _caller_flags(self, ctx))
        if rest:
            console.info("passed through (not modelled by the plan): "
                         + " ".join(tok for p in rest for tok in p.tokens))
        ctx.meta["engine_args"] = rest
        ctx.meta["engine_pasted"] = pasted
        ctx.meta["engine_target"] = engine.name
        return super().parse_args(ctx, mine)


def named_target(args: list[str]) -> EngineTarget:
    """`--engine NAME` typed before any bare `--` (an unknown NAME is left for click to refuse), else the default."""
    head = args[:args.index("--")] if "--" in args else args
    for a, b in zip(head, [*head[1:], ""]):
        name = a.partition("=")[2] if a.startswith("--engine=") else b if a == "--engine" else None
        if name is not None:
            return TARGETS.get(name) or target(None)
    return target(None)


def _engine_of_format(args: list[str], caller: dict[str, bool]) -> list[str]:
    """`export vllm ...` without --engine: `--engine vllm` in front (the first argument that is no flag's value)."""
    head = args[:args.index("--")] if "--" in args else args
    if any(a == "--engine" or a.startswith("--engine=") for a in head):
        return args
    i = 0
    while i < len(head) and head[i].startswith("-"):
        i += 2 if caller.get(head[i]) and "=" not in head[i] else 1
    return ["--engine", head[i], *args] if i < len(head) and head[i] in TARGETS else args


def _caller_flags(cmd: click.Command, ctx: click.Context) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for p in cmd.get_params(ctx):
        if isinstance(p, click.Option):
            for f in (*p.opts, *p.secondary_opts):
                out[f] = not (p.is_flag or p.count)
    return out


def engine_args(ctx: click.Context) -> list[PassThrough]:
    return list(ctx.meta.get("engine_args", []))


def typed_engine_args(ctx: click.Context) -> list[list[str]]:
    """The engine flags as typed (one token list per flag), for the options dict and a saved plan."""
    return [list(p.tokens) for p in engine_args(ctx)]


def merge_engine_args(saved: list[Any], typed: list[list[str]], engine: EngineTarget) -> list[list[str]]:
    """A saved plan's engine flags, with the ones typed now replacing those of the same setting."""
    now = {engine.dest(str(t[0])) for t in typed}
    return [list(t) for t in saved if engine.dest(str(t[0])) not in now] + typed
