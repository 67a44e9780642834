"""The torchrun export serves the tiny model on this machine exactly as emitted: `bash node-0.sh`, nothing else.

The only thing the test adds is what an activated venv gives a user: `torchrun` on PATH (a shim for this
interpreter, since a copied venv's own torchrun script may point at another interpreter).
"""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml
from click.testing import CliRunner

from dcpctl.cli.main import cli

READY_TIMEOUT_S = 150


def export(tmp_path, *flags):
    out = tmp_path / "deploy"
    r = CliRunner().invoke(cli, ["export", "torchrun", *flags, "-o", str(out)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return out


def test_files_and_env(tmp_path):
    out = export(tmp_path, "--preset", "tiny-cpu")
    assert sorted(p.name for p in out.iterdir()) == ["launch.yaml", "node-0.sh", "serve.json"]
    script = (out / "node-0.sh").read_text()
    assert 'DCPCTL_LAUNCH_CONFIG="$HERE/launch.yaml" DCPCTL_SERVE="$HERE/serve.json"' in script
    assert "--standalone" in script and "--nproc-per-node=2" in script
    cfg = yaml.safe_load((out / "launch.yaml").read_text())
    assert cfg["world_size"] == 2 and cfg["topology"]["dcp_size"] == 2
    from dcpctl.launch.default_model import default_model
    assert cfg["model"]["path"] == str(default_model().path)      # the trained checkpoint `launch` serves
    assert json.loads((out / "serve.json").read_text()) == {"host": "127.0.0.1", "port": 30000}


def test_multi_node_uses_c10d_and_keeps_the_cluster_model_path(tmp_path):
    out = export(tmp_path, "--preset", "deepseek-v3.1-tp8-dcp8", "--tp-size", "16", "--nnodes", "2",
                 "--dist-init-addr", "10.0.0.1:5000")
    assert "--node-rank=1 --rdzv-backend=c10d --rdzv-endpoint=10.0.0.1:5000" in (out / "node-1.sh").read_text()
    cfg = yaml.safe_load((out / "launch.yaml").read_text())
    assert cfg["model"]["path"] == "deepseek-ai/DeepSeek-V3.1" and cfg["device"] == "cuda"


def test_runtime_limits_are_user_errors(tmp_path):
    r = CliRunner().invoke(cli, ["export", "torchrun", "--preset", "kimi-k3-32gpu-dpa-dcp8"])
    assert r.exit_code == 2 and "the bundled runtime has no fi_a2a exchange" in r.output
    r = CliRunner().invoke(cli, ["export", "torchrun", "--preset", "deepseek-v3.1-tp8-dcp8", "--disaggregation-mode",
                                 "decode", "--disaggregation-peer-dcp-size", "1"])
    assert r.exit_code == 2 and "export it with `dcpctl export sglang`" in r.output


@pytest.mark.slow
def test_exported_script_serves_the_tiny_model(tmp_path):
    out = export(tmp_path, "--preset", "tiny-cpu", "--port", "0")
    assert json.loads((out / "serve.json").read_text())["port"] == 0     # a free port, not the default
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "torchrun").write_text(f'#!/bin/sh\nexec {sys.executable} -m torch.distributed.run "$@"\n')
    (shim / "torchrun").chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}
    log = tmp_path / "stderr.txt"
    with log.open("w") as err:
        proc = subprocess.Popen(["bash", str(out / "node-0.sh")], cwd=tmp_path, env=env, stdout=err, stderr=err,
                                start_new_session=True)
    try:
        url = _wait_ready(proc, log)
        body = json.dumps({"model": "tiny-deepseek-stdlib", "prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0})
        req = urllib.request.Request(f"{url}/v1/completions", body.encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            answer = json.loads(resp.read())
        assert answer["usage"]["completion_tokens"] == 4 and answer["choices"][0]["finish_reason"] == "length"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the session this test started: bash, torchrun and its ranks
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _wait_ready(proc, log):
    deadline = time.time() + READY_TIMEOUT_S
    while time.time() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("dcpctl-ready "):
                return line.split()[1]
        if proc.poll() is not None:
            pytest.fail(f"node-0.sh exited with {proc.returncode}: {log.read_text()[-2000:]}")
        time.sleep(0.5)
    pytest.fail(f"no dcpctl-ready line in {READY_TIMEOUT_S} s: {log.read_text()[-2000:]}")
