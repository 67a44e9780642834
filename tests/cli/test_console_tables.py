"""console.table at 80 columns: never splits a word or a number; drops borders before it would."""
import io

import pytest
from rich.console import Console

from dcpctl import console

COLS = ["choice", "fits", "max conc.", "step attn (ms)", "kv read (us)", "compute (us)", "gemm (us)",
        "exchange (us)", "tok/s"]
ROWS = [["dcp 8 a2a", "yes", 37, "13.505", "125.8", "147.7", "7.6", "49.3", "20,980,480"],
        ["dcp 2 ag_rs", "no", 9, "35.218", "503.3", "147.7", "7.6", "33.0", "0"]]


def render(monkeypatch, width, columns, rows):
    term = Console(width=width, file=io.StringIO(), highlight=False)
    monkeypatch.setattr(console, "out", term)
    term.print(console.table("t", columns, rows))
    return term.file.getvalue()


@pytest.mark.parametrize("width", [80, 64])
def test_words_stay_whole_and_the_table_fits(monkeypatch, width):
    text = render(monkeypatch, width, COLS, ROWS)
    assert max(len(line) for line in text.splitlines()) <= width, text
    words = {w for c in COLS for w in c.split()} | {w for r in ROWS for c in r for w in str(c).split()}
    tokens = set(text.replace("│", " ").replace("┃", " ").split())
    assert words <= tokens, sorted(words - tokens)


def test_wide_terminals_keep_the_boxed_one_line_layout(monkeypatch):
    text = render(monkeypatch, 160, COLS, ROWS)
    assert "┃ choice      ┃ fits ┃ max conc. ┃" in text and len(text.splitlines()) == 7


def test_cells_are_plain_text_not_markup(monkeypatch):
    # plan's backend reason names an extra: rich markup would take `[flashinfer]` for a style and drop it
    text = render(monkeypatch, 100, ["setting", "reason"], [["x", "pip install 'dcpctl[flashinfer]' [bold]y[/]"]])
    assert "'dcpctl[flashinfer]'" in text and "[bold]y[/]" in text
