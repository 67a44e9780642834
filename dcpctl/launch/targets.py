"""The `sglang serve` flags a plan passed through, carried into an export as typed (never twice)."""
from __future__ import annotations

from dcpctl.plan.engine_args import EngineTable


def carried(table: EngineTable, written: list[str], typed: tuple[tuple[str, ...], ...]) -> list[str]:
    """The typed flags whose setting the export has not written itself, in the order typed."""
    have = {_dest(table, tok) for tok in written if tok.startswith("-")}
    out: list[str] = []
    for group in typed:
        if _dest(table, group[0]) not in have:
            out += group
    return out


def typed_dests(table: EngineTable, typed: tuple[tuple[str, ...], ...]) -> set[str]:
    return {_dest(table, g[0]) for g in typed}


def _dest(table: EngineTable, tok: str) -> str:
    arg = table.lookup(tok.partition("=")[0])
    return arg.dest if arg else tok
