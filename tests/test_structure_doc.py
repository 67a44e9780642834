"""docs/structure.md gives every module one line: a new module without a line fails here."""
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_every_module_has_a_line():
    doc = (ROOT / "docs" / "structure.md").read_text()
    missing = []
    for f in sorted((ROOT / "dcpctl").rglob("*.py")):
        section = f"## {f.parent.relative_to(ROOT)}/"
        start = doc.find(section)
        if start < 0 or f"- `{f.name}`:" not in doc[start:doc.find("\n## ", start + 1) % (len(doc) + 1)]:
            missing.append(str(f.relative_to(ROOT)))
    assert missing == []
