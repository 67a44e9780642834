"""bench: user mistakes fail before any work, help explains, CPU tables carry no empty GPU columns."""
import socket

from click.testing import CliRunner

from dcpctl.cli.main import cli


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_bench_serve_unreachable_or_bad_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connection refused
        r = run("bench", "serve", "--url", f"http://127.0.0.1:{port}")
    assert r.exit_code == 2 and f"cannot connect to http://127.0.0.1:{port}" in r.output
    r = run("bench", "serve", "--url", "foo")
    assert r.exit_code == 2 and "--url must look like http://HOST:PORT" in r.output


def test_bench_decode_unwritable_output_fails_first(tmp_path):
    (tmp_path / "afile").write_text("x")
    r = run("bench", "decode", "-o", tmp_path / "afile" / "rows.json")
    assert r.exit_code == 2 and "cannot write -o" in r.output and "bench decode: shape" not in r.output


def test_bench_help_has_examples_not_module_pointers():
    for sub in ("decode", "capacity"):
        r = run("bench", sub, "--help")
        assert r.exit_code == 0 and "Examples:" in r.output and "module docstring" not in r.output
    r = run("bench", "--help")
    assert "capacity" in r.output and "Examples:" in r.output


def test_bench_decode_cpu_table_drops_gpu_only_columns(tmp_path):
    out = tmp_path / "rows.json"
    r = run("bench", "decode", "--tp-size", "2", "--dcp-sizes", "1,2", "--batches", "1", "--contexts", "16",
            "--steps", "1", "--warmup", "0", "-o", out)
    assert r.exit_code == 0, r.output
    assert "step ms" in r.output and "graph ms" not in r.output and "predicted" not in r.output
    assert out.exists()
