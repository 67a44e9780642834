"""Every flag of an engine's server on a dcpctl command: `cls=EngineCommand` (plan, export, recommend).

Before click parses, the command line is split with the engine's argument table
(dcpctl/plan/engine_args.py): a pasted launcher (`-- sglang serve ...`) is unwrapped; an engine flag
that dcpctl has under another spelling (an alias, or an abbreviation the engine's argparse accepts,
such as `--tp` for `--tp-size`) is renamed to dcpctl's; every other engine flag is checked and kept as
typed in `ctx.meta["engine_args"]`, for the plan to list and `export` to carry. An unknown flag is one
sentence naming the nearest engine flag. Another engine is another `EngineSyntax` on the command.
"""
from __future__ import annotations

import difflib
from typing import Any

import click

from dcpctl import console
from dcpctl.plan.engine_args import PassThrough, split
from dcpctl.plan.errors import UserError
from dcpctl.plan.vllm import VLLM_VERSION
from dcpctl.plan.vllm_args import flag_table
from dcpctl.plan.sglang_args import SGLANG, EngineSyntax

# dcpctl models these SGLang flags and also carries them as typed: SGLang's --attention-backend sets the prefill
# kernel too, which the plan (decode only) does not write.
CARRY_AS_TYPED = frozenset({"--attention-backend"})


class EngineCommand(click.Command):
    engine: EngineSyntax = SGLANG

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if _names_vllm(args):   # vLLM's modelled flags are dcpctl options of their own (cli/vllm_options.py)
            mine, rest = _split_vllm(list(args), _caller_flags(self, ctx))
            if rest:
                console.info(f"passed through (not modelled by the plan): {' '.join(rest)}")
            return super().parse_args(ctx, mine)
        args, pasted = self.engine.strip_launcher(list(args))
        caller = _caller_flags(self, ctx)
        args = _rename(self.engine, args, caller)
        mine, rest = split(self.engine.table, args, caller, record=CARRY_AS_TYPED)
        ctx.meta["engine_args"] = rest
        ctx.meta["engine_pasted"] = pasted
        return super().parse_args(ctx, mine)


def _names_vllm(args: list[str]) -> bool:
    """`--engine vllm` typed before any bare `--`: the SGLang table does not judge the flags."""
    head = args[:args.index("--")] if "--" in args else args
    return "--engine=vllm" in head or any(a == "--engine" and b == "vllm" for a, b in zip(head, head[1:]))


def _split_vllm(args: list[str], caller: dict[str, bool]) -> tuple[list[str], list[str]]:
    """(the tokens dcpctl parses, the other `vllm serve` flags as typed); a flag vLLM lacks: one sentence, exit 2."""
    table, mine, rest, i = flag_table(), [], [], 0
    while i < len(args):
        tok = args[i]
        name, eq, _ = tok.partition("=")
        if tok == "--":
            return mine + args[i:], rest
        if not tok.startswith("-") or name in caller:
            mine.append(tok)
            i += 1
            continue
        if name not in table:
            near = difflib.get_close_matches(name, [*table, *caller], n=1)
            raise UserError(f"{name} is not an option of dcpctl or of `vllm serve` (vLLM {VLLM_VERSION})"
                            + (f"; the nearest is {near[0]}" if near else ""))
        n = 1 if table[name][1] and not eq else 0
        rest += args[i:i + 1 + n]
        i += 1 + n
    return mine, rest


def _caller_flags(cmd: click.Command, ctx: click.Context) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for p in cmd.get_params(ctx):
        if isinstance(p, click.Option):
            for f in (*p.opts, *p.secondary_opts):
                out[f] = not (p.is_flag or p.count)
    return out


def _rename(engine: EngineSyntax, args: list[str], caller: dict[str, bool]) -> list[str]:
    """Engine spellings of dcpctl's flags (`--tp`, `--dp`, `--tensor-parallel-size`) -> dcpctl's own."""
    out = []
    after_dashes = False
    for tok in args:
        after_dashes = after_dashes or tok == "--"
        name, eq, val = tok.partition("=")
        if after_dashes or not name.startswith("--") or name in caller:
            out.append(tok)
            continue
        arg = engine.table.lookup(name)
        mine = [f for f in (arg.flags if arg else ()) if f in caller and f.startswith("--no-") == name.startswith("--no-")]
        out.append(f"{mine[0]}{eq}{val}" if mine else tok)
    return out


def engine_args(ctx: click.Context) -> list[PassThrough]:
    return list(ctx.meta.get("engine_args", []))


def typed_engine_args(ctx: click.Context) -> list[list[str]]:
    """The engine flags as typed (one token list per flag), for the options dict and a saved plan."""
    return [list(p.tokens) for p in engine_args(ctx)]


def merge_engine_args(saved: list[Any], typed: list[list[str]]) -> list[list[str]]:
    """A saved plan's engine flags, with the ones typed now replacing those of the same flag."""
    table = SGLANG.table
    now = {_dest(table, t) for t in typed}
    return [list(t) for t in saved if _dest(table, t) not in now] + typed


def _dest(table: Any, tokens: list[str]) -> str:
    arg = table.lookup(str(tokens[0]).partition("=")[0])
    return arg.dest if arg else str(tokens[0])
