"""One rich Console wrapper for tables, warnings and errors (stdout for results, stderr for the rest)."""
from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

out = Console(highlight=False, soft_wrap=False)
err = Console(stderr=True, highlight=False)


def error(msg: str) -> None:
    err.print(f"[bold red]error:[/] {escape(msg)}", markup=True, soft_wrap=True)


def warn(msg: str) -> None:
    err.print(f"[yellow]warning:[/] {escape(msg)}", soft_wrap=True)


def info(msg: str) -> None:
    err.print(msg, soft_wrap=True)


def table(title: str | None, columns: list[str], rows: list[list[Any]], **kw: Any) -> Table:
    t = Table(title=title, title_justify="left", title_style="bold", **kw)
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*[str(x) for x in r])
    return t


def write_text(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
