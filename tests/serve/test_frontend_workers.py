"""Several HTTP worker processes on one port (--tokenizer-worker-num): the real Frontend, a scripted engine
loop.

The kernel spreads connections over the workers, so a test cannot pick one: it opens enough fresh connections
that both are reached (all of 12 landing on one worker has odds 2^-11), and checks what must hold whichever
answered: every request streams its own tokens, and /metrics agrees on each worker, including a finish that
only the worker which served the request saw (a stop string).
"""
import json
import threading
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from dcpctl.runtime.engine.events import Event, ReplicaStats
from dcpctl.runtime.server.frontend import Frontend, FrontendSpec
from dcpctl.runtime.tokenizer import MARKER

TEXT = b"hello world"


def _engine(front: Frontend, stop: threading.Event, seen: list[int]) -> None:
    """Each request streams TEXT's bytes, one per step, until max_new_tokens or a cancel."""
    running: dict[int, int] = {}
    while not stop.is_set():
        msg = front.take(wait=not running)
        for r in msg.new:
            running[r.rid] = 0
            seen.append(r.rid)
        for rid in msg.cancel:
            running.pop(rid, None)
        events = []
        for rid, n in list(running.items()):
            running[rid] = n + 1
            done = n + 1 == len(TEXT)
            events.append(Event(rid, TEXT[n], -0.5, "length" if done else ""))
            if done:
                del running[rid]
        front.on_step(events, [ReplicaStats(0, len(running), 10, 10)], 0.001 if events else 0.0)
        time.sleep(0.002 if events else 0)


@pytest.fixture(scope="module")
def front(tmp_path_factory):
    tok = Path(tmp_path_factory.mktemp("tok"))
    (tok / MARKER).write_text("")
    spec = FrontendSpec("127.0.0.1", 0, None, 1 << 16, None, "fake", str(tok), 264, 4096, 1 << 16, 1, 64,
                        False, 0, workers=2)
    f = Frontend(spec)
    stop, seen = threading.Event(), []
    t = threading.Thread(target=_engine, args=(f, stop, seen), daemon=True)
    t.start()
    yield f, seen
    stop.set()
    t.join(5)
    f.stop()


def _finished(url: str) -> dict[str, float]:
    with httpx.Client() as c:   # a fresh connection: either worker may answer
        text = c.get(url + "/metrics", timeout=10).text
    return {s.labels["reason"]: s.value for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.name == "dcpctl_finished_requests_total"}


def test_two_workers_stream_their_own_requests_and_agree_on_metrics(front):
    f, seen = front
    assert len(f.workers) == 2 and all(w.proc.poll() is None for w in f.workers)
    texts = []
    for _ in range(12):
        with httpx.Client() as c:
            r = c.post(f.url + "/v1/completions", json={"prompt": "x", "max_tokens": 32, "stream": True},
                       timeout=30)
        chunks = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
        texts.append("".join(ch["choices"][0]["text"] for ch in chunks))
    assert texts == [TEXT.decode()] * 12
    assert len(set(seen)) == 12 and {rid % 2 for rid in seen} == {0, 1}   # both workers took requests
    with httpx.Client() as c:   # a stop string: the serving worker ends it; the engine only sees a cancel
        r = c.post(f.url + "/v1/completions", json={"prompt": "x", "max_tokens": 32, "stop": ["wor"]},
                   timeout=30)
    assert r.json()["choices"][0]["text"] == "hello "
    deadline = time.monotonic() + 10
    while True:
        counts = [_finished(f.url) for _ in range(8)]
        if all(c.get("stop") == 1 and c.get("length") == 12 for c in counts) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert all(c.get("stop") == 1 and c.get("length") == 12 for c in counts), counts


def test_a_dead_worker_leaves_the_others_serving(front):
    """Runs last: SIGKILL one worker; its listening socket closes with it, the engine drops its pipe and says
    so."""
    f, _ = front
    victim = f.workers[1]
    victim.proc.kill()
    victim.proc.wait(10)
    deadline = time.monotonic() + 10
    while len(f.workers) > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [w.index for w in f.workers] == [0]
    for _ in range(6):
        with httpx.Client() as c:
            r = c.post(f.url + "/v1/completions", json={"prompt": "x", "max_tokens": 32}, timeout=30)
        assert r.status_code == 200 and r.json()["choices"][0]["text"] == TEXT.decode()


def test_the_last_worker_gone_fails_the_engine_loop(tmp_path):
    (tmp_path / MARKER).write_text("")
    f = Frontend(FrontendSpec("127.0.0.1", 0, None, 1 << 16, None, "fake", str(tmp_path), 264, 4096, 1 << 16,
                              1, 64, False, 0))
    try:
        f.workers[0].proc.kill()
        f.workers[0].proc.wait(10)
        with pytest.raises(RuntimeError, match="every HTTP worker exited"):
            for _ in range(50):
                f.take(wait=True)
    finally:
        f.stop()
