"""Every `dcpctl` command in README.md, docs/*.md (```bash blocks) and the commands' --help examples runs as
written.

How each command is checked:
  run       CPU commands, in-process (CliRunner), in one temp directory per document so a block's
            `-o plan.yaml && dcpctl plan plan.yaml` works; exit 0, or 2 where its comment says
            "exit 2"/"invalid".
  dry-run   `dcpctl launch` without --dry-run would serve until stopped: the same argv with --dry-run.
  parse     commands that name what the user must supply (an upper-case placeholder such as DIR or NAME, or
            `...`), need a GPU (--device cuda) or a running server, or are minutes-long benchmarks
            (bench decode/exchange/kernel/serve): click parses the argv (every flag exists, every value has
            its type and choice) without running it.
Only `dcpctl` (and `python -m dcpctl.cli.main`) commands are checked; scripts under benchmarks/ are not.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from dcpctl.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```(?:bash|sh|shell)\n(.*?)```", re.S)
PLACEHOLDER = re.compile(r"^(\.\.\.|[A-Z][A-Z0-9_]*)$|\.\.\.")
LONG_BENCHES = {"decode", "exchange", "kernel", "serve"}


def _lines(block: str) -> list[str]:
    """Continuation lines joined into one command line each."""
    return [x for x in block.replace("\\\n", " ").splitlines() if x.strip()]


def _commands(line: str) -> list[tuple[list[str], str]]:
    """(dcpctl argv, the line's comment) for every dcpctl command of a shell line (split at && and ;)."""
    code, _, comment = line.partition(" #") if not line.lstrip().startswith("#") else ("", "", line)
    out = []
    for part in re.split(r"&&|;", code):
        try:
            toks = shlex.split(part)
        except ValueError:
            continue
        while toks and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", toks[0]):
            toks.pop(0)  # VAR=value prefixes
        if toks[:1] == ["dcpctl"]:
            out.append((toks[1:], comment))
        elif len(toks) > 2 and toks[0].startswith("python") and toks[1:3] == ["-m", "dcpctl.cli.main"]:
            out.append((toks[3:], comment))
    return out


def doc_commands() -> list[tuple[str, list[str], str]]:
    found = []
    for doc in DOCS:
        for block in BLOCK.findall(doc.read_text()):
            for line in _lines(block):
                found += [(doc.name, argv, comment) for argv, comment in _commands(line)]
    return found


def help_commands() -> list[tuple[str, list[str], str]]:
    found = []
    for name in cli.list_commands(click.Context(cli)):
        cmd = cli.get_command(click.Context(cli), name)
        for line in _lines(cmd.help or ""):
            if line.strip().startswith("dcpctl "):
                found += [(f"dcpctl {name} --help", argv, comment) for argv,
                          comment in _commands(line.strip())]
    return found


def how(argv: list[str]) -> str:
    if any(PLACEHOLDER.search(a) for a in argv) or "cuda" in argv or (argv[:1] == ["bench"] and
                                                                       argv[1:2] and argv[1] in LONG_BENCHES):
        return "parse"
    if argv[:1] == ["launch"] and "--dry-run" not in argv:
        return "dry-run"
    return "run"


def _parse(argv: list[str]) -> None:
    """click's own parsing and type conversion of argv, without running the command."""
    args = [a for a in argv if a != "..."]
    ctx, cmd = click.Context(cli), cli
    while isinstance(cmd, click.Group):  # dcpctl, then bench / presets
        name, args = args[0], args[1:]
        cmd = cmd.get_command(ctx, name)
        assert cmd is not None, f"no command {name!r}"
        ctx = click.Context(cmd, parent=ctx, info_name=name)
    cmd.make_context(name, args, parent=ctx.parent)


def _unique(found: list[tuple[str, list[str], str]]) -> list[tuple[str, list[str], str]]:
    seen: set[tuple[str, ...]] = set()
    return [c for c in found if tuple(c[1]) not in seen and not seen.add(tuple(c[1]))]


CASES = _unique(doc_commands() + help_commands())
DIRS: dict[str, Path] = {}
REPO_INPUTS = ("benchmarks", "presets")  # docs run "from the repo root": the files they name are linked in


def _workdir(where: str, factory: pytest.TempPathFactory) -> Path:
    if where not in DIRS:
        d = DIRS[where] = factory.mktemp("doc")
        for name in REPO_INPUTS:
            (d / name).symlink_to(ROOT / name)
        (d / "docs" / "img").mkdir(parents=True)   # the picture examples write here, not into the repo
    return DIRS[where]


def test_examples_were_found():
    names = {" ".join(argv[:1]) for _, argv, _ in CASES}
    assert {"plan", "export", "recommend", "launch", "generate", "presets", "bench"} <= names, names
    assert len(CASES) >= 35


@pytest.mark.parametrize("where, argv, comment", CASES,
                         ids=[f"{w}: {' '.join(a)[:70]}" for w, a, _ in CASES])
def test_example_runs_as_written(where, argv, comment, tmp_path_factory, monkeypatch):
    mode = how(argv)
    if mode == "parse":
        _parse(argv)
        return
    monkeypatch.chdir(_workdir(where, tmp_path_factory))
    args = argv + ["--dry-run"] if mode == "dry-run" else argv
    r = CliRunner().invoke(cli, args, catch_exceptions=False)
    want = 2 if re.search(r"exit 2|invalid", comment) else 0
    assert r.exit_code == want, f"{where}: dcpctl {' '.join(args)}\n{r.output[-1500:]}"
    assert "internal error" not in r.output


def test_parse_mode_catches_what_a_user_would_hit():
    with pytest.raises(click.UsageError, match="No such option"):
        _parse(["generate", "--model-path", "DIR", "--tp-sise", "4"])
    with pytest.raises(click.BadParameter):
        _parse(["launch", "--model-path", "DIR", "--device", "tpu"])
    with pytest.raises(AssertionError, match="no command"):
        _parse(["bench", "decodes", "--device", "cuda"])
    assert _commands("A=1 python3 -m dcpctl.cli.main bench capacity && dcpctl plan  # exit 2") == [
        (["bench", "capacity"], " exit 2"), (["plan"], " exit 2")]
