"""End to end: `dcpctl launch` on the tiny model (2 ranks, DCP 2) against real clients.

One server for the whole module (float64 so batched greedy equals `dcpctl generate` exactly), with two HTTP
worker processes on its port (--tokenizer-worker-num 2): each client connection lands on either, so every
test here also checks that the workers agree (ids, /metrics counts).
"""
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.serve.server import Server

openai = pytest.importorskip("openai")

PROMPTS = ["Hello", "The quick brown fox"]
IDS = [5, 17, 99, 3]
MAX_NEW = 10
CAPACITY = 4096  # virtual KV tokens; the tiny model's context is 2048


@pytest.fixture(scope="module")
def server():
    s = Server("--dtype", "float64", "--max-total-tokens", str(CAPACITY), "--max-running-requests", "8",
               "--max-request-bytes", "65536", "--tokenizer-worker-num", "2")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def reference():
    args = [a for p in PROMPTS for a in ("--prompt", p)] + ["--prompt-ids", ",".join(map(str, IDS))]
    p = subprocess.run([sys.executable, "-m", "dcpctl.cli.main", "generate", *args, "--max-new-tokens",
                        str(MAX_NEW), "--temperature", "0", "--dtype", "float64", "--format", "json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    outs = json.loads(p.stdout)["outputs"]
    return outs[1:] + outs[:1]  # generate runs --prompt-ids first: reorder as PROMPTS + [IDS]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=60, max_retries=0)


def _metrics(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=10).text
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = s.name + ("{" + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())) + "}"
                            if s.labels else "")
            out[key] = s.value
    return out


def _wait_idle(url: str, timeout: float = 20.0) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while True:
        m = _metrics(url)
        idle = (m["dcpctl_running_requests"] == 0 and m["dcpctl_queued_requests"] == 0
                and m["dcpctl_kv_pages_used{rank=0}"] == 0 and m["dcpctl_kv_pages_used{rank=1}"] == 0)
        if idle or time.monotonic() > deadline:
            return m
        time.sleep(0.2)


def test_openai_completions_match_generate(client, reference):
    for prompt, want in zip(PROMPTS + [IDS], reference):
        r = client.completions.create(model="tiny-deepseek-stdlib", prompt=prompt, max_tokens=MAX_NEW,
                                      temperature=0)
        assert r.choices[0].text == want["text"]
        assert r.usage.completion_tokens == len(want["output_ids"])
        streamed = client.completions.create(model="tiny-deepseek-stdlib", prompt=prompt, max_tokens=MAX_NEW,
                                             temperature=0, stream=True)
        chunks = list(streamed)
        assert "".join(c.choices[0].text for c in chunks) == want["text"]
        assert chunks[-1].choices[0].finish_reason == r.choices[0].finish_reason


def test_native_generate_returns_the_same_ids(server, reference):
    want = reference[2]
    r = httpx.post(server.url + "/generate", json={"input_ids": IDS, "return_logprob": True,
                                                   "sampling_params": {"max_new_tokens": MAX_NEW,
                                                                       "temperature": 0}},
                   timeout=60).json()
    assert r["output_ids"] == want["output_ids"]
    assert r["meta_info"]["completion_tokens"] == len(want["output_ids"])
    with httpx.stream("POST", server.url + "/generate",
                      json={"input_ids": IDS, "stream": True,
                            "sampling_params": {"max_new_tokens": MAX_NEW, "temperature": 0}},
                      timeout=60) as s:
        events = [line[6:] for line in s.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and json.loads(events[-2])["output_ids"] == want["output_ids"]


def test_logprobs_and_chat(client):
    r = client.completions.create(model="tiny-deepseek-stdlib", prompt="Hi", max_tokens=4, temperature=0,
                                  logprobs=1)
    lp = r.choices[0].logprobs
    assert len(lp.token_logprobs) == 4 and all(x <= 0 for x in lp.token_logprobs)
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Hi"}]
    c = client.chat.completions.create(model="tiny-deepseek-stdlib", messages=msgs, max_tokens=6,
                                       temperature=0, logprobs=True)
    assert c.choices[0].message.role == "assistant" and c.usage.completion_tokens <= 6
    assert len(c.choices[0].logprobs.content) == c.usage.completion_tokens
    s = client.chat.completions.create(model="tiny-deepseek-stdlib", messages=msgs, max_tokens=6,
                                       temperature=0, stream=True)
    assert ("".join(ch.choices[0].delta.content or "" for ch in s if ch.choices)
            == c.choices[0].message.content)
    assert [m.id for m in client.models.list().data] == ["tiny-deepseek-stdlib"]


def test_stop_string_ends_the_request(client, reference):
    text = reference[0]["text"]
    stop = next((text[i:i + 1] for i in range(2, len(text)) if text[i:i + 1].isprintable()), None)
    if stop is None:
        pytest.skip("no printable character in the reference continuation")
    r = client.completions.create(model="tiny-deepseek-stdlib", prompt=PROMPTS[0], max_tokens=MAX_NEW,
                                  temperature=0, stop=[stop])
    assert r.choices[0].finish_reason == "stop" and r.choices[0].text == text[:text.index(stop)]


def test_sixteen_concurrent_clients(client, server):
    prompts = [f"client {i % 4} says" for i in range(16)]
    solo = {p: client.completions.create(model="tiny-deepseek-stdlib", prompt=p, max_tokens=8, temperature=0)
            .choices[0].text
            for p in sorted(set(prompts))}
    with ThreadPoolExecutor(16) as pool:
        texts = list(pool.map(lambda p: client.completions.create(model="tiny-deepseek-stdlib", prompt=p,
                                                                  max_tokens=8,
                                                                  temperature=0).choices[0].text, prompts))
    assert texts == [solo[p] for p in prompts]
    m = _wait_idle(server.url)
    assert m["dcpctl_kv_pages_used{rank=0}"] == 0


BAD = [  # (body, status, words in the message)
    ({"prompt": "x", "max_tokens": "many"}, 400, ["max_tokens"]),
    ({"max_tokens": 4}, 400, ["prompt"]),
    ({"prompt": "x", "temperature": -1}, 400, ["temperature"]),
    ({"prompt": "x", "n": 2}, 400, ["n"]),
    ({"prompt": [1, 99999]}, 400, ["99999", "vocab_size"]),
    ({"prompt": []}, 400, ["empty"]),
    ({"prompt": ["a", "b"]}, 400, ["one prompt"]),
    ({"prompt": [1, 2, 3], "max_tokens": CAPACITY}, 400, ["3 tokens", f"({CAPACITY})", f"{CAPACITY + 3}",
                                                          f"KV capacity of {CAPACITY}",
                                                          "context length is 2048"]),
    ({"prompt": [1, 2, 3], "max_tokens": 2100}, 400,
     ["2103", "context length is 2048", "at most 2045 new tokens"]),
]


@pytest.mark.parametrize("body,status,words", BAD)
def test_bad_requests_get_openai_errors(server, body, status, words):
    r = httpx.post(server.url + "/v1/completions", json=body, timeout=30)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error"
    for w in words:
        assert w in err["message"], err["message"]


def test_malformed_json_oversize_and_unknown_route(server):
    r = httpx.post(server.url + "/v1/completions", content=b'{"prompt": ', timeout=30,
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]
    r = httpx.post(server.url + "/v1/chat/completions", json={"messages": []}, timeout=30)
    assert r.status_code == 400 and "messages" in r.json()["error"]["message"]
    r = httpx.post(server.url + "/v1/completions", json={"prompt": "x" * 70000}, timeout=30)
    assert r.status_code == 413 and "65536" in r.json()["error"]["message"]
    assert httpx.get(server.url + "/nope", timeout=30).status_code == 404
    assert httpx.get(server.url + "/health", timeout=30).text == "ok"


def test_client_disconnect_mid_stream_frees_pages(server):
    body = {"prompt": "Hello", "max_tokens": 1500, "temperature": 0, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=30) as s:
        lines = s.iter_lines()
        got = [next(lines) for _ in range(6)]
    assert any(g.startswith("data: ") for g in got)
    m = _wait_idle(server.url)
    assert m["dcpctl_running_requests"] == 0 and m["dcpctl_kv_pages_used{rank=1}"] == 0
    assert m["dcpctl_kv_pages_free{rank=0}"] > 0 and m["dcpctl_generated_tokens_total"] < 1400
    assert m["dcpctl_finished_requests_total{reason=abort}"] >= 1  # the client that went away is counted


def test_unseeded_requests_differ_and_seeded_ones_repeat(client, server):
    def texts(**kw):
        return [client.completions.create(model="tiny-deepseek-stdlib", prompt="Hello", max_tokens=12,
                                          temperature=1.0, **kw).choices[0].text for _ in range(3)]
    unseeded = texts()
    assert len(set(unseeded)) == 3, unseeded
    seeded = texts(seed=1234)
    assert len(set(seeded)) == 1, seeded
    r = httpx.post(server.url + "/generate", json={"text": "Hello", "sampling_params": {
        "max_new_tokens": 12, "temperature": 1.0, "seed": 1234}}, timeout=60).json()
    assert r["text"] == seeded[0]  # the same seed on the native route: the same tokens


def test_metrics_parse_as_prometheus_text(server):
    m = _metrics(server.url)
    for name in ("dcpctl_running_requests", "dcpctl_queued_requests", "dcpctl_tokens_per_second",
                 "dcpctl_step_seconds_count", "dcpctl_dcp_exchange_seconds_total",
                 "dcpctl_kv_pages_free{rank=1}"):
        assert name in m
    assert m["dcpctl_step_seconds_count"] > 0 and m["dcpctl_dcp_exchange_seconds_total"] > 0


def test_bench_serve_json(server):
    from click.testing import CliRunner

    from dcpctl.bench.serve import command
    r = CliRunner().invoke(command,
                           ["--url", server.url, "--concurrency", "4", "--requests", "8", "--input-len", "8",
                            "--output-len", "4", "--format", "json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["completed"] == 8 and out["failed"] == 0
    assert out["ttft_ms"]["p50"] > 0 and out["itl_ms"]["p99"] >= out["itl_ms"]["p50"] > 0
    assert out["output_token_throughput"] > 0


def test_bench_serve_poisson_arrivals_over_a_decoding_background(server):
    from click.testing import CliRunner

    from dcpctl.bench.serve import command
    r = CliRunner().invoke(command,
                           ["--url", server.url, "--concurrency", "3", "--requests", "4", "--input-len", "40",
                            "--output-len", "4", "--random-range-ratio", "0.5", "--request-rate", "20",
                            "--seed", "1", "--background-streams", "2", "--background-output-len", "24",
                            "--format", "json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["completed"] == 6 and out["failed"] == 0 and out["request_rate"] == 20.0
    bg, arr = out["classes"]["background"], out["classes"]["arrival"]
    assert (bg["completed"], bg["total_output_tokens"], arr["completed"]) == (2, 48, 4)
    assert 20 <= arr["total_input_tokens"] <= 240 and arr["total_output_tokens"] <= 24
    for m in (out, bg, arr):
        assert (m["p99_itl_ms"] >= m["median_itl_ms"] > 0 and m["mean_ttft_ms"] > 0
                and m["output_throughput"] > 0)


def test_zz_clean_shutdown(server):
    m = _wait_idle(server.url)
    assert m["dcpctl_kv_pages_used{rank=0}"] == 0
    rc, took = server.stop()
    assert rc == 0, "".join(server.stderr)[-2000:]
    assert took < 15
    assert "stopped" in "".join(server.stderr)
