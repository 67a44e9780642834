"""A rank that dies: requests get 503 (or the connection drops), the launcher exits non-zero, no hang."""
import os
import signal
import threading
import time

import httpx

from tests.serve.server import Server, descendants, running


def test_rank_death_stops_the_launcher():
    s = Server()
    try:
        pids = s.worker_pids()
        assert set(pids) == {0, 1}, pids
        statuses = []

        def long_request():
            body = {"prompt": "Hello", "max_tokens": 1000, "ignore_eos": True}
            try:
                statuses.append(httpx.post(s.url + "/v1/completions", json=body, timeout=60).status_code)
            except httpx.HTTPError as e:
                statuses.append(type(e).__name__)

        t = threading.Thread(target=long_request)
        t.start()
        time.sleep(1.0)
        os.kill(pids[1], signal.SIGKILL)
        t.join(60)
        t0 = time.monotonic()
        rc = s.proc.wait(60)
        assert rc != 0
        assert time.monotonic() - t0 < 30
        assert statuses and statuses[0] in (503, "RemoteProtocolError", "ReadError", "ConnectError"), statuses
        err = "".join(s.stderr)
        assert "error: rank 1 died: Signal 9 (SIGKILL)" in err, err[-2000:]
    finally:
        s.stop()


def test_launcher_sigkill_leaves_no_process_behind():
    s, below = Server(), []
    try:
        assert set(s.worker_pids()) == {0, 1}
        below += descendants(s.proc.pid)  # torchrun and both ranks
        assert len(below) >= 3, below
        os.kill(s.proc.pid, signal.SIGKILL)
        t0 = time.monotonic()
        while running(below) and time.monotonic() - t0 < 10:
            time.sleep(0.1)
        took = time.monotonic() - t0
        assert not running(below), f"still running {took:.1f} s after the launcher died: {running(below)}"
        assert took < 5, f"the ranks took {took:.1f} s to go"
    finally:
        for pid in running(below):  # orphans (now children of init) when the test failed
            os.kill(pid, signal.SIGKILL)
        s.stop()
