"""The repository explains itself: references point into docs/design.md's numbered sections, and docs' links
to files in the repository resolve."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("dcpctl", "docs", "benchmarks", "tools", "tests", "scripts", "presets")
SUFFIXES = {".py", ".md", ".sh", ".yaml"}
SECTION_REF = re.compile(r"docs/design\.md\]?(?:\([^)]*\))? sections? ((?:\d+(?:, | and )?)+)")
OUTSIDE = re.compile(r"DESIGN(?:\.md| sections?)|\.\./shared/|STYLE \d")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)   # links inside code are text


def _texts() -> list[tuple[str, str]]:
    files = [ROOT / "README.md"] + [p for d in FOLDERS for p in sorted((ROOT / d).rglob("*"))
                                    if p.suffix in SUFFIXES and ".venv" not in p.parts]
    return [(str(p.relative_to(ROOT)), p.read_text()) for p in files if p != Path(__file__).resolve()]


def test_design_sections_referenced_exist():
    sections = set(re.findall(r"^## (\d+)\. ", (ROOT / "docs/design.md").read_text(), re.M))
    assert sections == {str(n) for n in range(1, 10)}
    bad = [f"{name}: section {n}" for name, text in _texts() for m in SECTION_REF.finditer(text)
           for n in re.findall(r"\d+", m.group(1)) if n not in sections]
    assert bad == []


def test_nothing_cites_a_document_outside_the_repository():
    bad = [f"{name}: {m.group(0)}" for name, text in _texts() for m in OUTSIDE.finditer(text)]
    assert bad == []


def test_docs_links_to_repository_files_resolve():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
            *sorted((ROOT / "benchmarks").rglob("*.md")), ROOT / "tools/README.md"]
    broken = [f"{d.relative_to(ROOT)}: {target}" for d in docs
              for target in LINK.findall(CODE.sub("", d.read_text()))
              if "://" not in target and not (d.parent / target).exists()]
    assert broken == []
