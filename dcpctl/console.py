"""One rich Console wrapper for tables, warnings and errors (stdout for results, stderr for the rest)."""
from __future__ import annotations

import sys
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

out = Console(highlight=False, soft_wrap=False)
err = Console(stderr=True, highlight=False)


def error(msg: str) -> None:
    err.print(f"[bold red]error:[/] {escape(msg)}", markup=True, soft_wrap=True)


def warn(msg: str) -> None:
    err.print(f"[yellow]warning:[/] {escape(msg)}", soft_wrap=True)


def info(msg: str) -> None:
    err.print(msg, soft_wrap=True)


WIDEST_WORD = 24   # a word longer than this may still fold (long paths, rank lists)
COMPACT = {"box": box.SIMPLE_HEAD, "show_edge": False, "pad_edge": False, "collapse_padding": True}


def table(title: str | None, columns: list[str], rows: list[list[Any]], **kw: Any) -> Table:
    """Words and numbers are never split: each column is at least as wide as its longest word; a table that
    does not fit the terminal so drops its vertical borders (COMPACT), and if it still does not, shows one
    record per row (header: value lines), wrapping cells only between words.  Cells are plain text, never rich
    markup: `pip install 'dcpctl[flashinfer]'` keeps its brackets."""
    cells = [[str(x) for x in r] for r in rows]
    texts = [[c, *(r[i] for r in cells if i < len(r))] for i, c in enumerate(columns)]
    widths = None
    if "box" not in kw:
        widths = _fit(texts, out.width - 3 * len(columns) - 1)
        if widths is None:
            kw |= COMPACT
            widths = _fit(texts, out.width - 2 * len(columns) + 2)
        if widths is None:
            return _records(title, columns, cells, kw)
    t = Table(title=title, title_justify="left", title_style="bold", **kw)
    for i, c in enumerate(columns):
        t.add_column(c, overflow="fold", width=widths[i] if widths else None)
    for r in cells:
        t.add_row(*map(Text, r))
    return t


def _records(title: str | None, columns: list[str], cells: list[list[str]], kw: dict[str, Any]) -> Table:
    t = Table(title=title, title_justify="left", title_style="bold", show_header=False, **kw)
    t.add_column(overflow="fold", style="bold")
    t.add_column(overflow="fold")
    for r in cells:
        for i, (c, v) in enumerate(zip(columns, r)):
            t.add_row(Text(c), Text(v), end_section=i == len(r) - 1)
    return t


def _fit(texts: list[list[str]], room: int) -> list[int] | None:
    """Column widths summing to at most `room` with every word whole; None when the words alone overflow."""
    full = [max((len(line) for v in t for line in v.splitlines()), default=1) for t in texts]
    least = [min(max((len(w) for v in t for w in v.split()), default=1), WIDEST_WORD, f) for t, f in zip(texts, full)]
    if sum(full) <= room:
        return full
    if sum(least) > room:
        return None
    widths, spare = list(least), room - sum(least)
    for i in sorted(range(len(full)), key=lambda i: full[i] - least[i]):  # unwrap the cheapest columns first
        grow = min(full[i] - least[i], spare)
        widths[i], spare = widths[i] + grow, spare - grow
    return widths


def write_text(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
