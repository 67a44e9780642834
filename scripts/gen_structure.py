"""Regenerate docs/structure.md's module lines from the modules' docstrings: `python -m
scripts.gen_structure`.

Each `## dcpctl/<folder>/` section lists its modules, one line each: the first paragraph of the module's
docstring on one line, "(package marker)" for a module without one. The prose before the first section and
after the last (one rule per fact, adding a decision or a kernel, the lifecycles) and each section heading's
description are the doc's own, kept as written. `--check` changes nothing and exits 1 when the doc differs
from its modules (tests/test_structure_doc.py runs the same comparison).
"""
from __future__ import annotations

import argparse
import ast
import difflib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "structure.md"
SECTION = re.compile(r"^## (dcpctl(?:/[\w/]*)?)/(?: — (.*))?$")


def module_line(path: Path) -> str:
    doc = (ast.get_docstring(ast.parse(path.read_text())) or "").strip()
    return " ".join(doc.split("\n\n")[0].split()) if doc else "(package marker)"


def modules(root: Path) -> dict[str, list[tuple[str, str]]]:
    """Folder (relative to the repository) -> its modules' (file name, line), folders and files in path
    order."""
    out: dict[str, list[tuple[str, str]]] = {}
    for f in sorted((root / "dcpctl").rglob("*.py")):
        out.setdefault(str(f.parent.relative_to(root)), []).append((f.name, module_line(f)))
    return out


def render(text: str, root: Path = ROOT) -> str:
    """The doc `text` with its module sections rebuilt from the modules under root; its other prose kept."""
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if SECTION.match(line)]
    first = starts[0] if starts else len(lines)
    last = starts[-1] if starts else len(lines)
    tail = next((i for i in range(last + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    heads = {m.group(1): m.group(2) for m in map(SECTION.match, lines) if m and m.group(2)}
    body: list[str] = []
    for folder, items in modules(root).items():
        body += [f"## {folder}/" + (f" — {heads[folder]}" if folder in heads else ""), ""]
        body += [f"- `{name}`: {line}" for name, line in items] + [""]
    return "\n".join(lines[:first] + body + lines[tail:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare only; exit 1 and print the difference")
    a = ap.parse_args(argv)
    text = DOC.read_text()
    new = render(text)
    if a.check:
        diff = list(difflib.unified_diff(text.splitlines(), new.splitlines(), "docs/structure.md", "modules",
                                         lineterm=""))
        print("\n".join(diff) or "docs/structure.md matches the modules' docstrings")
        return 1 if diff else 0
    if new != text:
        DOC.write_text(new)
        print("docs/structure.md rewritten from the modules' docstrings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
