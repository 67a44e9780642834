"""An engine's server arguments as data (name, aliases, arity, type, choices, default) and argparse's rules
for them.

A table is read from a JSON file written by a script that asks the engine's own argument parser
(benchmarks/sglang/dump_args.py for SGLang). `split` takes a command line apart into the flags a caller
models and the rest, which it keeps exactly as typed (the pass-through flags) after checking them the
way the engine's parser would: a known name or an unambiguous prefix of one, the values it takes, a
value among its choices. A name the engine does not have is one sentence naming the nearest one.
"""
from __future__ import annotations

import difflib
import functools
import importlib.resources
import json
from dataclasses import dataclass
from typing import Any

from dcpctl.plan.errors import UserError


@dataclass(frozen=True)
class EngineArg:
    dest: str
    flags: tuple[str, ...]  # every option string, the first the engine's own spelling
    nargs: str  # "0" (a switch), "1", "?", "*", "+"
    type: str  # "int", "float", "str", "bool", "json", ...
    choices: tuple[str, ...] | None
    default: Any
    help: str = ""


@dataclass(frozen=True)
class EngineTable:
    engine: str  # "sglang"
    version: str
    command: str  # what a user types: "sglang serve"
    args: tuple[EngineArg, ...]

    @functools.cached_property
    def by_flag(self) -> dict[str, EngineArg]:
        return {f: a for a in self.args for f in a.flags}

    @functools.cached_property
    def by_dest(self) -> dict[str, EngineArg]:
        return {a.dest: a for a in self.args}

    def lookup(self, flag: str) -> EngineArg | None:
        """An exact option string, else an unambiguous prefix of long ones (argparse's allow_abbrev)."""
        if flag in self.by_flag:
            return self.by_flag[flag]
        if not flag.startswith("--"):
            return None
        hits = {self.by_flag[f].dest: self.by_flag[f] for f in self.by_flag if f.startswith(flag)}
        if len(hits) > 1:
            raise UserError(f"{flag} is ambiguous in {self.label}: it could be "
                            + ", ".join(sorted(a.flags[0] for a in hits.values())))
        return next(iter(hits.values()), None)

    def nearest(self, flag: str, also: tuple[str, ...] = ()) -> str | None:
        names = [f for f in (*self.by_flag, *also) if f.startswith("--")]
        got = difflib.get_close_matches(flag, names, n=1, cutoff=0.5)
        return got[0] if got else None

    @property
    def label(self) -> str:
        return f"`{self.command}` ({self.engine} {self.version})"


@functools.cache
def load_table(resource: str) -> EngineTable:
    """A table shipped under dcpctl/data/engines/ (written by the engine's dump script)."""
    text = importlib.resources.files("dcpctl").joinpath("data", "engines", resource).read_text()
    doc = json.loads(text)
    args = tuple(EngineArg(dest=a["dest"], flags=tuple(a["flags"]), nargs=str(a["nargs"]), type=a["type"],
                           choices=tuple(a["choices"]) if a.get("choices") is not None else None,
                           default=a.get("default"), help=a.get("help", "")) for a in doc["args"])
    return EngineTable(engine=doc["engine"], version=doc["version"], command=doc["command"], args=args)


@dataclass(frozen=True)
class PassThrough:
    """One engine flag as the user typed it: the tokens are carried into an export unchanged."""
    dest: str
    flag: str  # the engine's own spelling
    tokens: tuple[str, ...]  # as typed (the flag, then its values)
    values: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"flag": self.flag, "dest": self.dest, "argv": list(self.tokens)}


def split(table: EngineTable, tokens: list[str], caller: dict[str, bool],
          record: frozenset[str] = frozenset()) -> tuple[list[str], list[PassThrough]]:
    """(the tokens the caller parses itself, the engine flags passed through), both in the order typed.

    `caller` maps each option string the caller parses itself to whether it takes a value; one of
    those in `record` is also kept as typed. Positional tokens stay with the caller; so does
    everything after a bare `--`.
    """
    mine: list[str] = []
    rest: list[PassThrough] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "--":
            mine += tokens[i:]
            break
        if not tok.startswith("-") or _is_number(tok):
            mine.append(tok)
            i += 1
            continue
        name, eq, inline = tok.partition("=")
        own = caller.get(name)
        if own is not None:
            n = 1 if own and not eq else 0
            mine += tokens[i:i + 1 + n]
            arg = table.by_flag.get(name)
            vals = (inline,) if eq else tuple(tokens[i + 1:i + 1 + n])
            if name in record and arg is not None and all(arg.choices is None or v in arg.choices
                                                          for v in vals):
                # kept only when the engine takes the value (dcpctl's own `auto` means: leave it to the
                # engine)
                rest.append(PassThrough(arg.dest, arg.flags[0], tuple(tokens[i:i + 1 + n]), vals))
            i += 1 + n
            continue
        arg = table.lookup(name)
        if arg is None:
            near = table.nearest(name, also=tuple(caller))
            hint = f"; the nearest is {near}" if near else ""
            raise UserError(f"{name} is not an option of dcpctl or of {table.label}{hint}")
        start = i
        values, i = _values(table, arg, name, tokens, i + 1, [inline] if eq else [])
        rest.append(PassThrough(arg.dest, arg.flags[0], tuple(tokens[start:i]), tuple(values)))
    return mine, rest


def _is_number(tok: str) -> bool:
    try:
        float(tok)
        return True
    except ValueError:
        return False


def _values(table: EngineTable, arg: EngineArg, name: str, tokens: list[str], j: int,
            inline: list[str]) -> tuple[list[str], int]:
    """The values `arg` takes from tokens[j:] (argparse's arity), checked against its type and choices."""
    if arg.nargs == "0":
        if inline:
            raise UserError(f"{name} takes no value in {table.label}, got {name}={inline[0]}")
        return [], j
    vals = list(inline)
    if not inline:
        want = {"1": 1, "?": 1, "*": None, "+": None}.get(arg.nargs,
                                                          int(arg.nargs) if arg.nargs.isdigit() else None)
        while j < len(tokens) and (want is None or len(vals) < want) and (
                not tokens[j].startswith("-") or _is_number(tokens[j])):
            vals.append(tokens[j])
            j += 1
    if not vals and arg.nargs in ("1", "+"):
        raise UserError(f"{name} needs a value in {table.label}")
    for v in vals:
        _check_value(table, arg, name, v)
    return vals, j


def _check_value(table: EngineTable, arg: EngineArg, name: str, v: str) -> None:
    if arg.choices is not None and v not in arg.choices:
        raise UserError(f"{name} {v} is not accepted by {table.label}; valid: {', '.join(arg.choices)}")
    conv = {"int": int, "float": float}.get(arg.type)
    if conv is not None:
        try:
            conv(v)
        except ValueError:
            raise UserError(f"{name} takes {'an integer' if arg.type == 'int' else 'a number'} in "
                            f"{table.label}, got {v!r}") from None
