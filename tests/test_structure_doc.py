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


def test_module_lines_are_the_docstrings():
    """Each module's line is its docstring's first paragraph: `python -m scripts.gen_structure` rewrites
    them."""
    from scripts import gen_structure
    doc = (ROOT / "docs" / "structure.md").read_text()
    assert gen_structure.render(doc) == doc, \
        "docs/structure.md: run `python -m scripts.gen_structure --check`"


def test_render_keeps_the_prose_and_rebuilds_the_sections(tmp_path):
    from scripts import gen_structure
    (tmp_path / "dcpctl" / "sub").mkdir(parents=True)
    (tmp_path / "dcpctl" / "__init__.py").write_text('"""The root.\n\nMore."""\n')
    (tmp_path / "dcpctl" / "sub" / "__init__.py").write_text("")
    (tmp_path / "dcpctl" / "sub" / "a.py").write_text('"""A module,\nwrapped."""\n')
    doc = ("# Structure\n\nIntro.\n\n## dcpctl/ — the root\n\n- `old.py`: gone\n\n"
           "## dcpctl/sub/ — a folder\n\n## Afterwards\n\nProse.\n")
    assert gen_structure.render(doc, tmp_path) == (
        "# Structure\n\nIntro.\n\n## dcpctl/ — the root\n\n- `__init__.py`: The root.\n\n"
        "## dcpctl/sub/ — a folder\n\n- `__init__.py`: (package marker)\n- `a.py`: A module, wrapped.\n\n"
        "## Afterwards\n\nProse.\n")


# The house's floors, lowest first: a module imports its own floor or lower, never higher (the CLI and its
# commands on top; plan/ and the root modules, knobs, console and tuning tables, at the bottom).
FLOORS = {"(root)": 0, "tuning": 0, "plan": 1, "contract": 2, "runtime": 3, "launch": 4, "plot": 4,
          "bench": 5, "cli": 6, "presets": 0}


def _module(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    """Every dcpctl module -> the dcpctl modules it imports, at the top or inside a function."""
    import ast
    mods = {_module(p): p for p in (ROOT / "dcpctl").rglob("*.py")}
    graph = {}
    for name, path in mods.items():
        out = set()
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Import):
                out |= {a.name for a in n.names}
            elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
                out |= {f"{n.module}.{a.name}" if f"{n.module}.{a.name}" in mods else n.module
                        for a in n.names}
        graph[name] = {m for m in out if m in mods and m != name}
    return graph


def _floor(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2
                                          and (ROOT / "dcpctl" / parts[1]).is_dir()) else "(root)"


def test_no_import_goes_up_a_floor():
    up = sorted(f"{a} -> {b}" for a, deps in _graph().items() for b in deps
                if FLOORS[_floor(b)] > FLOORS[_floor(a)])
    assert up == []


def test_no_import_circles():
    graph, seen, circles = _graph(), {}, []

    def visit(node: str, path: list[str]) -> None:
        seen[node] = "open"
        for dep in sorted(graph[node]):
            if seen.get(dep) == "open":
                circles.append(" -> ".join(path[path.index(dep):] + [dep]))
            elif dep not in seen:
                visit(dep, path + [dep])
        seen[node] = "done"

    for node in sorted(graph):
        if node not in seen:
            visit(node, [node])
    assert circles == []
