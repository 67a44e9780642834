import importlib.util
import subprocess
import sys

import pytest
from click.testing import CliRunner

from dcpctl.cli.main import cli
from tests.plot.helpers import PNG_MAGIC


def run(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_planner_and_recommend_do_not_import_matplotlib_without_a_picture():
    code = ("import sys; from dcpctl.cli.main import main\n"
            "for argv in (['plan','--tp-size','8','--dcp-size','8','--format','json'],\n"
            "             ['recommend','--model-preset','deepseek-v3.1','--hardware','h200-8',"
            "'--tp-size','8',\n"
            "              '--context-len','8192','--contexts','8192','--concurrency','4',"
            "'--format','json']):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "print('matplotlib' in sys.modules, 'torch' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.stdout.strip().endswith("False False"), p.stdout + p.stderr


@pytest.mark.parametrize("name", ["x.jpg", "x", "x.png.pdf"])
def test_other_extensions_are_one_sentence_exit_2(tmp_path, name):
    out = tmp_path / name
    r = run("plan", "--tp-size", "8", "--picture", str(out))
    assert r.exit_code == 2 and "must end in .png or .svg" in r.stderr and r.stderr.count("\n") == 1
    assert not out.exists() and r.stdout == ""  # checked while parsing, before the plan is printed


def test_missing_extra_names_it(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "matplotlib" else real(n, *a))
    r = run("recommend", "--tp-size", "8", "--context-len", "8192", "--concurrency", "1",
            "--picture", str(tmp_path / "x.png"))
    assert r.exit_code == 2
    assert (r.stderr.strip()
            == "error: --picture needs matplotlib, an optional extra: pip install 'dcpctl[plot]'")

needs_matplotlib = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="the plot extra")


@needs_matplotlib
def test_plan_picture_valid_and_invalid(tmp_path):
    good, bad = tmp_path / "good.png", tmp_path / "bad.svg"
    r = run("plan", "--preset", "kimi-k3-32gpu-dpa-dcp8", "--format", "json", "--picture", str(good))
    assert r.exit_code == 0 and good.read_bytes()[:8] == PNG_MAGIC and f"saved picture to {good}" in r.stderr
    r = run("plan", "--hardware", "h200-8", "--tp-size", "8", "--dp-size", "4", "--enable-dp-attention",
            "--dcp-size", "4", "--picture", str(bad))
    assert (r.exit_code == 2 and bad.read_text().lstrip().startswith("<?xml")
            and "dcp_containment" in bad.read_text())


@needs_matplotlib
def test_recommend_picture(tmp_path):
    out = tmp_path / "x.png"
    r = run("recommend", "--model-preset", "deepseek-v3.1", "--hardware", "h200-8", "--tp-size", "8",
            "--context-len", "32768", "--contexts", "32768", "--concurrency", "8", "--picture", str(out))
    assert r.exit_code == 0 and out.read_bytes()[:8] == PNG_MAGIC and out.stat().st_size > 10_000
    # every choice invalid (the built-in tiny model's 2,048 positions < 32K): an empty panel, not a crash
    r = run("recommend", "--hardware", "h200-8", "--tp-size", "4", "--context-len", "32768", "--contexts",
            "32768", "--concurrency", "8", "--picture", str(out))
    assert r.exit_code == 0 and out.read_bytes()[:8] == PNG_MAGIC


def test_help_names_the_option():
    for cmd in ("plan", "recommend"):
        r = run(cmd, "--help")
        assert "--picture" in r.output and "dcpctl[plot]" in r.output
