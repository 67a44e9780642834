"""What strangers' connections cost `dcpctl launch` (tiny model, an API key): header bounds before anything
parses the request, read timeouts for idle and half-sent connections, OpenAI's error types, and a retracted
stream that a proxy's read timeout does not cut (the keep-alive interval and the timeouts shrunk: 0.2 s
comments, a 1 s read timeout standing for a proxy's 60 s, a 1 s request read timeout).
"""
import json
import socket
import threading
import time

import httpx
import pytest

from benchmarks.header_flood import big_header, cpu_seconds, frontend_pid, streamed_itl, under_headers
from tests.serve.server import Server, descendants

KEY = {"Authorization": "Bearer k"}
READ_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def server():
    # 160 KV tokens: two 120-token streams cannot both run to the end, so one is retracted and waits
    s = Server("--api-key", "k", "--request-read-timeout", str(READ_TIMEOUT_S), "--sse-keepalive-interval",
               "0.2", "--max-total-tokens", "160", "--chunked-prefill-size", "64")
    yield s
    s.stop()


def _addr(server: Server) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def test_a_keyless_64_mb_header_is_refused_at_a_few_ms_of_cpu(server):
    fe, addr = frontend_pid(server.proc.pid), _addr(server)
    before = cpu_seconds(fe)
    replies = [big_header(addr) for _ in range(5)]
    time.sleep(0.3)
    per_attack = (cpu_seconds(fe) - before) / 5
    assert all(r == b"" or r.startswith(b"HTTP/1.1 431 ") for r in replies), replies
    assert per_attack < 0.05, f"{per_attack * 1000:.0f} ms of the HTTP process's CPU per 64 MB header"


def test_too_many_headers_is_431_and_a_normal_request_passes(server):
    r = httpx.get(server.url + "/v1/models", headers=KEY | {f"x-h{i}": "1" for i in range(300)})
    assert r.status_code == 431 and "256 headers" in r.json()["error"]["message"]
    assert httpx.get(server.url + "/v1/models", headers=KEY | {"x-pad": "a" * 100_000}).status_code == 200


def test_header_attacks_leave_an_authorized_stream_on_pace(server):
    # four keyless 64 MB headers a second while a stream decodes (before: one stalled a stream for up to 1.76
    # s)
    quiet = streamed_itl(server.url)
    loud = under_headers(server.url, _addr(server))
    # the median gap moves by a few ms at most (on a loaded machine the attacker's own CPU shows too)
    assert loud[len(loud) // 2] < quiet[len(quiet) // 2] * 1.5 + 0.01, (quiet, loud)
    assert loud[-1] < quiet[-1] + 0.5, (quiet, loud)


@pytest.mark.parametrize("sent", [b"", b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n",
                                  b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: "
                                  b"Bearer k\r\nContent-Length: 100\r\n\r\n{\"pro"],
                         ids=["idle", "half-sent head", "half-sent body"])
def test_idle_and_half_sent_connections_close_after_the_read_timeout(server, sent):
    with socket.create_connection(_addr(server), timeout=30) as sock:
        sock.sendall(sent)
        t0 = time.monotonic()
        reply = sock.recv(4096)
        took = time.monotonic() - t0
        assert sock.recv(4096) == b""                   # then closed
    assert reply.startswith(b"HTTP/1.1 "
                            b"408 ") and READ_TIMEOUT_S * 0.9 < took < READ_TIMEOUT_S + 2, (reply, took)


def test_wrong_method_and_unknown_route_are_openai_errors(server):
    r = httpx.get(server.url + "/v1/completions", headers=KEY)
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert r.json()["error"] == {"message": "Invalid method for URL (GET /v1/completions)",
                                 "type": "invalid_request_error", "param": None, "code": 405}
    r = httpx.post(server.url + "/v1/nothing", headers=KEY)
    assert r.status_code == 404 and r.json()["error"]["message"] == "Invalid URL (POST /v1/nothing)"


def test_a_proxy_read_timeout_keeps_a_retracted_stream(server):
    """Two streams that do not fit together: one is retracted and waits for the other's pages, seconds without
    a token, during which comments keep arriving well inside the proxy's read timeout."""
    body = {"prompt": "x", "max_tokens": 120, "ignore_eos": True, "temperature": 0, "stream": True}
    got: dict[int, tuple[int, int, float]] = {}

    def stream(i: int) -> None:
        tokens = comments = 0
        gap, last = 0.0, time.monotonic()
        with httpx.stream("POST", server.url + "/v1/completions", json=body, headers=KEY,
                          timeout=httpx.Timeout(60, read=READ_TIMEOUT_S)) as r:
            for line in r.iter_lines():
                now = time.monotonic()
                gap, last = max(gap, now - last), now
                tokens += line.startswith("data: {")
                comments += line.startswith(":")
        got[i] = (tokens, comments, gap)
    threads = [threading.Thread(target=stream, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    retracted = httpx.get(server.url + "/metrics", headers=KEY).text
    assert "dcpctl_retracted_requests_total 0.0" not in retracted, "nothing was retracted: nothing was tested"
    assert [got[i][0] for i in range(2)] == [120, 120], got         # both streams whole
    assert max(got[i][1] for i in range(2)) > 0 and max(g for _, _, g in got.values()) < READ_TIMEOUT_S, got


def test_the_api_key_is_in_no_file_and_no_rank_command_line(server):
    for pid in [server.proc.pid, *descendants(server.proc.pid)]:
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
            env = dict(e.split(b"=", 1)
                       for e in open(f"/proc/{pid}/environ", "rb").read().split(b"\0") if b"=" in e)
        except OSError:
            continue
        if b"dcpctl.runtime.worker" in cmd:
            assert b"--api-key" not in cmd and env.get(b"DCPCTL_API_KEY") == b"k"
            serve = env[b"DCPCTL_SERVE"].decode()
            assert "api_key" not in json.loads(open(serve).read() if not serve.startswith("{") else serve)
