"""dcpctl/knobs.py declares every environment variable: docs/knobs.md lists exactly those, no other module
reads os.environ, every DCPCTL_* name the repo mentions is declared, and `dcpctl plan` is the same whatever
they hold."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from dcpctl import knobs
from dcpctl.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"\bDCPCTL_[A-Z0-9_]*[A-Z0-9]\b")
ENV_READ = re.compile(r"os\.environ|os\.getenv|getenv\(|environ\.get")
# names that look like variables but are not: a marker file the tiny checkpoint carries
NOT_VARIABLES = {"DCPCTL_TINY_VERSION", "DCPCTL_NOPE", "DCPCTL_ONLY"}


def table_rows() -> list[str]:
    """docs/knobs.md's table, one row per declared variable, in declaration order."""
    def default(k: knobs.Knob) -> str:
        return "unset" if k.default in (None, "") else f"`{k.default}`"
    return [f"| `{k.name}` | {k.kind} | {k.type.__name__} | {default(k)} | {k.meaning} |"
            for k in knobs.KNOBS.values()]


def test_the_docs_page_lists_every_variable_as_declared():
    doc = (ROOT / "docs" / "knobs.md").read_text()
    rows = [line for line in doc.split("## Variables", 1)[1].splitlines() if line.startswith("| `")]
    assert rows == table_rows(), ("docs/knobs.md is out of step with dcpctl/knobs.py: "
                                  + "\n".join(table_rows()))
    for kind in {k.kind for k in knobs.KNOBS.values()}:
        assert f"| {kind} | {knobs.KIND_MEANING[kind]} |" in doc


def test_no_module_but_the_registry_reads_the_environment():
    stray = [f"{f.relative_to(ROOT)}:{i}"
             for f in sorted((ROOT / "dcpctl").rglob("*.py")) if f.name != "knobs.py"
             or f.parent.name != "dcpctl" for i, line in enumerate(f.read_text().splitlines(), 1)
             if ENV_READ.search(line)]
    assert stray == []


def test_every_dcpctl_variable_the_repo_names_is_declared():
    files = [*(ROOT / "dcpctl").rglob("*.py"), *(ROOT / "docs").glob("*.md"), ROOT / "README.md",
             *(ROOT / "tests").rglob("*.py"), *(p for p in (ROOT / "benchmarks").rglob("*") if p.suffix in
                                                 (".py", ".sh", ".md"))]
    files = [f for f in files if not f.name.startswith("benchmarks-")]
    unknown = sorted({f"{n} ({f.relative_to(ROOT)})" for f in files for n in NAME.findall(f.read_text())
                      if n not in knobs.KNOBS and n not in NOT_VARIABLES})
    assert unknown == []


def test_undeclared_names_are_refused():
    with pytest.raises(knobs.KnobError, match="DCPCTL_NOPE is not declared in dcpctl/knobs.py"):
        knobs.get("DCPCTL_NOPE")


@pytest.mark.parametrize("text,want", [("", False), ("0", False), ("off", False), ("1", True), ("yes", True)])
def test_switches(monkeypatch, text, want):
    monkeypatch.setenv("DCPCTL_DEBUG", text)
    assert knobs.get("DCPCTL_DEBUG") is want


def test_an_integer_that_does_not_parse_is_named(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "one")
    with pytest.raises(knobs.KnobError, match=r"\$LOCAL_RANK='one' is not an integer"):
        knobs.get("LOCAL_RANK")


PLAN = ["plan", "--model-preset", "deepseek-v3", "--hardware", "h200-8", "--tp-size", "8", "--dcp-size", "8",
        "--page-size", "64", "--format", "json"]


def test_plan_is_the_same_whatever_the_environment(monkeypatch):
    for name in knobs.KNOBS:
        if name.startswith("DCPCTL_") and knobs.KNOBS[name].kind != "debug":
            monkeypatch.delenv(name, raising=False)
    bare = CliRunner().invoke(cli, PLAN)
    assert bare.exit_code == 0, bare.output
    for name in ("DCPCTL_FLASHMLA_SDIST", "DCPCTL_FLASHINFER_SDIST", "DCPCTL_CACHE", "DCPCTL_UNFUSED"):
        monkeypatch.setenv(name, "/elsewhere")
    assert CliRunner().invoke(cli, PLAN).stdout == bare.stdout


def test_plan_shows_the_runtime_settings_with_reasons():
    d = __import__("json").loads(CliRunner().invoke(cli, [*PLAN, "--fp8-gemm", "w8a8"]).stdout)["decisions"]
    assert d["fp8_gemm"] == {"value": "w8a8", "reason": "set by --fp8-gemm w8a8"}
    assert d["blas"]["value"] == "cublaslt" and d["blas"]["reason"].startswith("the default")
    assert d["dist_timeout"]["value"] == 600 and d["cublaslt_workspace_kib"]["value"] is None


if __name__ == "__main__":
    print("\n".join(table_rows()))
