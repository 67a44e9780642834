"""`dcpctl launch` checks that run before any process starts, and --dry-run."""
from click.testing import CliRunner

from dcpctl.cli.main import cli


def _run(*args):
    return CliRunner().invoke(cli, ["launch", *args], env={"DCPCTL_API_KEY": None})


def test_non_loopback_needs_an_api_key():
    r = _run("--host", "0.0.0.0")
    assert r.exit_code == 2
    assert "--host 0.0.0.0 is not a loopback address: pass --api-key KEY" in r.output


def test_dry_run_prints_config_and_torchrun():
    r = _run("--dry-run", "--host", "0.0.0.0")  # nothing binds, so no key is needed
    assert r.exit_code == 0, r.output
    assert "dist_backend: gloo" in r.output and "torch.distributed.run" in r.output


def test_node_rank_must_be_below_nnodes():
    r = _run("--nnodes", "1", "--node-rank", "1")
    assert r.exit_code == 2 and "--node-rank (1) must be < nnodes (1)" in r.output


def test_cold_start_progress_reaches_the_launcher():
    """ServeProcess hands rank 0's progress lines to its callback until the ready line (launch draws bars)."""
    import sys
    import threading

    from dcpctl.launch.runner import ServeProcess
    script = ("import sys, time\nfor i in range(3): print(f'dcpctl-progress loading {i + 1}/3', "
              "file=sys.stderr)\nprint('dcpctl-ready http://127.0.0.1:9', file=sys.stderr, "
              "flush=True)\ntime.sleep(0.2)\nprint('dcpctl-stopped', file=sys.stderr)")
    seen = []
    proc = ServeProcess([sys.executable, "-c", script], {}, on_progress=lambda *p: seen.append(p))
    assert proc.wait_ready(threading.Event()) in ("http://127.0.0.1:9", None)
    proc.wait(threading.Event())
    assert seen == [("loading", 1, 3), ("loading", 2, 3), ("loading", 3, 3)]


def test_engine_failures_reach_clients_as_a_short_reason():
    from dcpctl.runtime.server.serve import failure_reason
    e = RuntimeError("[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
                     "[127.0.0.1]:29781")
    assert (failure_reason(e)
            == "another rank stopped responding (RuntimeError); the server log has the detail")
    assert "/" not in failure_reason(ValueError("/some/internal/path.py failed"))


def test_the_dry_run_command_serves_as_printed(tmp_path):
    """Save the printed launch config as launch.yaml, run the printed node-0 line there: the model serves."""
    import os
    import re
    import signal
    import subprocess
    import threading

    import httpx

    from dcpctl.launch.torchrun import free_port
    r = _run("--dry-run", "--port", "0", "--dist-init-addr", f"127.0.0.1:{free_port()}")
    assert r.exit_code == 0, r.output
    config, _, rest = r.stdout.partition("\n# node 0\n")
    (tmp_path / "launch.yaml").write_text(config)
    env = {k: v for k, v in os.environ.items() if k != "DCPCTL_API_KEY"}
    proc = subprocess.Popen(["bash", "-c", rest.strip()], cwd=tmp_path, env=env, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    url = threading.Event()
    found: list[str] = []

    def watch() -> None:
        for line in proc.stderr:
            if m := re.match(r"dcpctl-ready (\S+)", line):
                found.append(m.group(1))
                url.set()
        url.set()
    threading.Thread(target=watch, daemon=True).start()
    try:
        assert url.wait(110) and found, "no ready line"
        assert httpx.get(found[0] + "/health", timeout=30).text == "ok"
        body = {"prompt": "def ", "max_tokens": 4, "temperature": 0}
        assert (httpx.post(found[0] + "/v1/completions", json=body, timeout=30)
                .json()["usage"]["completion_tokens"] == 4)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def test_the_built_in_model_bounds_json_whitespace_and_says_why():
    r = _run("--dry-run")
    assert "structured output: JSON whitespace at most 2 characters in a row (auto:" in r.stderr
    assert '"constrained_json_max_whitespace_cnt": 2' in r.stdout
    r = _run("--dry-run", "--constrained-json-disable-any-whitespace")
    assert "structured output:" not in r.stderr and '"constrained_json_max_whitespace_cnt"' not in r.stdout
    assert '"constrained_json_disable_any_whitespace": true' in r.stdout
