"""The real server under pressure (`dcpctl launch`, tiny model, 2 ranks, DCP 2): clients that leave, a hung
rank, and limits reported as enforced.

    a dropped client of every request kind frees its pages within a second of leaving
    /health generates one token: 503 within its timeout while rank 1 is stopped (SIGSTOP), 200 after SIGCONT
    --context-length 512 refuses a 701-token prompt and /v1/models says 512
    --max-total-tokens below the context: /v1/models reports what the pool holds, and that length is served
"""
import json
import os
import signal
import socket
import threading
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.serve.server import Server

HEALTH_TIMEOUT_S = 2


@pytest.fixture(scope="module")
def server():
    s = Server("--context-length", "512", "--health-check-timeout", str(HEALTH_TIMEOUT_S))
    deadline = time.monotonic() + 30     # the page gauges appear with the engine loop's first report after
                                         # ready
    while "dcpctl_kv_pages_used{0}" not in _metrics(s.url) and time.monotonic() < deadline:
        time.sleep(0.05)
    yield s
    s.stop()


def _metrics(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=10).text
    return {s.name + "".join(f"{{{v}}}" for v in s.labels.values()): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def _pages_used(m: dict[str, float]) -> float:
    return m["dcpctl_kv_pages_used{0}"] + m["dcpctl_kv_pages_used{1}"]


LONG = {"max_tokens": 480, "ignore_eos": True, "temperature": 0}
KINDS = [("/v1/completions", {"prompt": "Hello"} | LONG, False),
         ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]} | LONG, False),
         ("/generate", {"text": "Hello", "sampling_params": {"max_new_tokens": 480, "ignore_eos": True}},
          False),
         ("/generate", {"text": "Hello", "stream": True, "sampling_params": {"max_new_tokens": 480,
                                                                             "ignore_eos": True}}, True),
         ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "stream": True} | LONG,
          True)]


def _leave_early(url: str, path: str, body: dict, stream: bool, held: threading.Event,
                 left: list[float]) -> None:
    """Send the request, stay until the server shows its pages held (so a loaded machine cannot end the test
    before anything was held), then leave: close the connection mid-generation."""
    if stream:
        with httpx.stream("POST", url + path, json=body, timeout=60) as s:
            lines = s.iter_lines()
            for _ in range(4):
                next(lines)
            held.wait(60)
    else:       # no response before the end: a raw connection, closed while the request decodes
        host, port = url.removeprefix("http://").rsplit(":", 1)
        data = json.dumps(body).encode()
        with socket.create_connection((host, int(port)), timeout=60) as sock:
            sock.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
            held.wait(60)
    left.append(time.monotonic())


def _round_trip(url: str) -> float:
    """Seconds of one single-token request on this machine now: the slack a loaded machine adds to every
    step."""
    t0 = time.monotonic()
    httpx.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, timeout=60).raise_for_status()
    return time.monotonic() - t0


@pytest.mark.parametrize("path,body,stream", KINDS, ids=[f"{p}{'-stream' if s else ''}" for p, _, s in KINDS])
def test_a_dropped_client_frees_its_pages_within_a_second(server, path, body, stream):
    # a second on an idle machine; under load, plus a few of the single-token round trips measured just before
    bound = 1.0 + 3 * _round_trip(server.url)
    held, left = threading.Event(), []
    t = threading.Thread(target=_leave_early, args=(server.url, path, body, stream, held, left))
    t.start()
    while t.is_alive() and not held.is_set():
        if _pages_used(_metrics(server.url)) > 0:
            held.set()
        time.sleep(0.05)
    t.join()
    assert held.is_set(), "the request never held KV pages: nothing was tested"
    while (m := _metrics(server.url)) and _pages_used(m) > 0 and time.monotonic() - left[0] < 5 * bound:
        time.sleep(0.05)
    took = time.monotonic() - left[0]
    assert _pages_used(m) == 0 and m["dcpctl_running_requests"] == 0, m
    assert took < bound, f"pages freed {took:.2f} s after the client left (bound {bound:.2f} s)"
    assert m["dcpctl_generated_tokens_total"] < 480 * len(KINDS)


def test_context_length_is_enforced_and_reported(server):
    models = httpx.get(server.url + "/v1/models", timeout=10).json()
    assert models["data"][0]["max_model_len"] == 512
    r = httpx.post(server.url + "/v1/completions", json={"prompt": [5] * 701, "max_tokens": 4}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt", r.text
    assert "at most 512 tokens" in r.json()["error"]["message"]
    r = httpx.post(server.url + "/v1/completions", json={"prompt": [5] * 500, "max_tokens": None,
                                                         "temperature": 0, "ignore_eos": True}, timeout=60)
    assert r.status_code == 200 and r.json()["usage"]["total_tokens"] == 512, r.text


def test_health_sees_a_stopped_rank_and_its_return(server):
    assert httpx.get(server.url + "/health", timeout=30).text == "ok"
    rank1 = server.worker_pids()[1]
    os.kill(rank1, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        r = httpx.get(server.url + "/health", timeout=30)
        took = time.monotonic() - t0
        assert r.status_code == 503 and "no token within 2 s" in r.json()["error"]["message"], r.text
        assert HEALTH_TIMEOUT_S <= took < HEALTH_TIMEOUT_S + 2
        assert _metrics(server.url)["dcpctl_engine_report_age_seconds"] >= HEALTH_TIMEOUT_S   # marked stale
    finally:
        os.kill(rank1, signal.SIGCONT)
    deadline = time.monotonic() + 20
    while ((r := httpx.get(server.url + "/health", timeout=30)).status_code != 200
           and time.monotonic() < deadline):
        time.sleep(0.2)
    assert r.text == "ok"
    assert _metrics(server.url)["dcpctl_engine_report_age_seconds"] < 1.0


def test_zz_every_request_counted_once_and_a_clean_stop(server):
    m = _metrics(server.url)
    finished = {k: v for k, v in m.items() if k.startswith("dcpctl_finished_requests_total")}
    assert finished == {"dcpctl_finished_requests_total{abort}": len(KINDS),
                        # with _round_trip's; probes uncounted
                        "dcpctl_finished_requests_total{length}": 1 + len(KINDS)}, finished
    rc, _ = server.stop()
    assert rc == 0 and "stopped" in "".join(server.stderr)


def test_a_pool_below_the_context_is_what_models_reports():
    s = Server("--max-total-tokens", "1024")      # 1,024 KV rows hold 1,025 tokens; the model's context is
                                                  # 2,048
    try:
        assert httpx.get(s.url + "/v1/models", timeout=10).json()["data"][0]["max_model_len"] == 1025
        body = {"prompt": [5] * 1020, "max_tokens": 5, "ignore_eos": True, "temperature": 0}
        r = httpx.post(s.url + "/v1/completions", json=body, timeout=60)
        assert r.status_code == 200 and r.json()["usage"]["total_tokens"] == 1025, r.text
        r = httpx.post(s.url + "/v1/completions", json=body | {"max_tokens": 6}, timeout=60)
        assert r.status_code == 400 and "KV capacity of 1024 virtual tokens" in r.json()["error"]["message"]
    finally:
        s.stop()
