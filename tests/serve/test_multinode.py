"""Two "nodes" on one machine: `dcpctl launch --nnodes 2 --node-rank 0|1 --dist-init-addr` as with
SGLang. Node 0 serves the API over both nodes' ranks; stopping node 0 stops node 1 cleanly."""
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request

from tests.serve.server import Server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _complete(url: str) -> list:
    body = json.dumps({"prompt": "Hello", "max_tokens": 6, "temperature": 0}).encode()
    req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())["choices"][0]["text"]


def test_two_nodes_serve_like_one():
    single = Server("--tp-size", "2", "--dcp-size", "2")
    try:
        want = _complete(single.url)
    finally:
        single.stop()
    addr = f"127.0.0.1:{_free_port()}"
    flags = ["--tp-size", "2", "--dcp-size", "2", "--nnodes", "2", "--dist-init-addr", addr]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    node1 = subprocess.Popen([sys.executable, "-m", "dcpctl.cli.main", "launch", *flags, "--node-rank", "1"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        node0 = Server(*flags, "--node-rank", "0")
        try:
            assert _complete(node0.url) == want
        finally:
            rc0, _ = node0.stop()
        assert rc0 == 0
        assert node1.wait(timeout=60) == 0
    finally:
        if node1.poll() is None:
            node1.send_signal(signal.SIGKILL)
            node1.wait()
