"""The HTTP app without torch.distributed: a fake engine thread drives the real Bridge."""
import threading
import time

import pytest
from starlette.testclient import TestClient

from dcpctl.runtime.engine.events import Event, ReplicaStats
from dcpctl.launch.default_model import default_model
from dcpctl.runtime.server.app import build_app
from dcpctl.runtime.server.bridge import Bridge
from dcpctl.runtime.server.gen import ServerState
from dcpctl.runtime.server.metrics import Metrics
from dcpctl.runtime.server.text import TextStream, chat_prompt
from dcpctl.runtime.tokenizer import ByteTokenizer


class FakeEngine(threading.Thread):
    """Answers every request with the bytes of 'abcdef...' (one per step) until max_new_tokens."""

    def __init__(self, bridge: Bridge, metrics: Metrics, hold: bool = False):
        super().__init__(daemon=True)
        self.bridge, self.metrics, self.hold = bridge, metrics, hold
        self.live: dict[int, list] = {}
        self.cancelled: list[int] = []

    def run(self):
        while not self.bridge.stop_requested:
            msg = self.bridge.take(wait=not self.live)
            for r in msg.new:
                self.live[r.rid] = [r.params.max_new_tokens, 0]
            for rid in msg.cancel:
                self.cancelled.append(rid)
                self.live.pop(rid, None)
            if self.hold:
                continue
            events = []
            for rid, st in list(self.live.items()):
                st[1] += 1
                done = st[1] >= st[0]
                events.append(Event(rid, ord("a") + st[1] - 1, -0.5, "length" if done else ""))
                if done:
                    del self.live[rid]
            self.bridge.deliver(events)
            time.sleep(0.01)
            self.metrics.on_step(events, [ReplicaStats(0, len(self.live), 10, 10)], 0.001)


@pytest.fixture
def make():
    made = []

    def _make(api_key=None, max_outstanding=8, hold=False, allowed_hosts=None, context=64, capacity=48,
              health_timeout_s=20.0, kv_extra=0):
        metrics = Metrics(1)
        bridge = Bridge(max_outstanding, on_finish=lambda reason: metrics.finished.labels(reason).inc())
        state = ServerState(bridge, ByteTokenizer(), "fake", 260, context, capacity, metrics, api_key, 4096,
                            allowed_hosts=allowed_hosts, health_timeout_s=health_timeout_s, kv_extra=kv_extra,
                            model_path=str(default_model().path))
        engine = FakeEngine(bridge, metrics, hold)
        engine.start()
        made.append(bridge)
        return TestClient(build_app(state)), bridge, engine

    yield _make
    for b in made:
        b.stop_requested = True


def test_completion_text_and_auth(make):
    client, _, _ = make(api_key="sekrit")
    body = {"prompt": "hi", "max_tokens": 3}
    r = client.post("/v1/completions", json=body)
    assert r.status_code == 401 and r.json()["error"]["type"] == "invalid_request_error"
    assert client.post("/v1/completions", json=body,
                       headers={"Authorization": "Bearer nope"}).status_code == 401
    r = client.post("/v1/completions", json=body, headers={"Authorization": "Bearer sekrit"})
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == "abc"
    assert client.get("/health").text == "ok"  # no key needed
    assert client.get("/metrics").status_code == 401


def test_stop_string_cancels_in_the_engine(make):
    client, _, engine = make()
    r = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 6, "stop": ["cd"]}).json()
    assert r["choices"][0] == r["choices"][0] | {"text": "ab", "finish_reason": "stop"}
    deadline = time.monotonic() + 5
    while not engine.cancelled and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(engine.cancelled) == 1 and not engine.live


def test_full_queue_and_dead_engine_give_503(make):
    client, bridge, _ = make(max_outstanding=1, hold=True)
    import asyncio
    asyncio.run(_occupy(bridge))
    r = client.post("/v1/completions", json={"prompt": "hi"})
    assert r.status_code == 503 and "limit 1" in r.json()["error"]["message"]
    bridge.fail("RuntimeError: rank 1 went away")
    r = client.post("/v1/completions", json={"prompt": "hi"})
    assert r.status_code == 503 and "rank 1 went away" in r.json()["error"]["message"]
    assert client.get("/health").status_code == 503


def test_health_is_503_while_the_server_starts(make):
    # an HTTP worker up before its siblings (frontend.py) is `starting` until the engine's "serving" message:
    # a client polling /health must not see ok while requests would wait for the rest of the start
    client, bridge, _ = make()
    bridge.starting = True
    r = client.get("/health")
    assert r.status_code == 503 and "starting" in r.json()["error"]["message"]
    bridge.starting = False
    assert client.get("/health").text == "ok"


async def _occupy(bridge):
    from dcpctl.runtime.engine.request import SamplingParams
    bridge.open([1], SamplingParams())


def test_context_and_capacity_limits_name_the_numbers(make):
    client, _, _ = make()
    r = client.post("/v1/completions", json={"prompt": [1] * 40, "max_tokens": 10})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == (
        "max_tokens (10) is too large: prompt (40 tokens) + max_tokens = 50 > 49 tokens, the most one "
        "request holds (the context length is 64 and the KV capacity of 48 virtual tokens holds 49); at most "
        "9 new tokens fit this prompt")
    r = client.post("/generate", json={"input_ids": [1], "text": "x"})
    assert r.status_code == 400 and "exactly one" in r.json()["error"]["message"]


def test_text_stream_holds_back_partial_stops_and_utf8():
    tok = ByteTokenizer()
    ts = TextStream(tok, ["xyz"])
    assert [ts.push(t) for t in b"abx"] == ["a", "b", ""]
    assert ts.push(ord("q")) == "xq"
    euro = "€".encode()
    ts = TextStream(tok)
    assert [ts.push(b) for b in euro] == ["", "", "€"]
    ts = TextStream(tok, ["xy"])
    assert [ts.push(t) for t in b"axy"] == ["a", "", ""] and ts.stopped and ts.sent == "a"


def test_text_stream_window_decode_equals_the_whole_decode():
    """Deltas of the windowed decode, joined, are the text of all ids, for any mix of multi-byte
    characters."""
    import random
    tok, rng = ByteTokenizer(), random.Random(0)
    for _ in range(50):
        text = "".join(rng.choice(["a", " ", "é", "€", "😀", "\n"]) for _ in range(rng.randrange(1, 40)))
        ids = list(text.encode())
        ts = TextStream(tok, ["<stop>"])
        out = "".join(ts.push(t, final=i == len(ids) - 1) for i, t in enumerate(ids)) + ts.flush()
        assert out == text == tok.decode(ids)
        assert ts.read - ts.prefix <= 4    # one window, not the whole output


def test_plain_chat_template():
    ids = chat_prompt(ByteTokenizer(), [{"role": "user", "content": "hi"}])
    assert ids[0] == ByteTokenizer.bos_token_id and bytes(ids[1:]).decode() == "<|user|>\nhi\n<|assistant|>\n"
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x ="}]
    assert (bytes(chat_prompt(ByteTokenizer(), msgs, False, True)[1:]).decode()
            == "<|user|>\nhi\n<|assistant|>\nx =")


def test_a_hugging_face_template_gets_the_chat_switches_and_kwargs():
    """add_generation_prompt, continue_final_message and chat_template_kwargs reach transformers' template."""
    pytest.importorskip("transformers")
    from transformers import PreTrainedTokenizerFast

    from dcpctl.launch.default_model import default_model
    from dcpctl.runtime.tokenizer import HFTokenizer
    hf = PreTrainedTokenizerFast(tokenizer_file=str(default_model().path / "tokenizer.json"))
    hf.chat_template = ("{% if shout %}!{% endif %}{% for m in messages %}[{{ m['content'] }}]{% endfor %}"
                        "{% if add_generation_prompt %}>{% endif %}")
    tok, msgs = HFTokenizer(hf), [{"role": "user", "content": "hi"}]
    text = lambda ids: bytes(i for i in ids if i < 256).decode()   # noqa: E731
    assert text(chat_prompt(tok, msgs)) == "[hi]>"
    assert text(chat_prompt(tok, msgs, add_generation_prompt=False,
                            template_kwargs={"shout": True})) == "![hi]"


def test_kda_ceiling_in_metrics():
    from types import SimpleNamespace

    from prometheus_client.parser import text_string_to_metric_families
    pool = SimpleNamespace(used=3, free=5)
    text = Metrics(1, kda_pool=pool).render().decode()
    samples = {(s.name, s.labels.get("state")): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert (samples[("dcpctl_kda_state_slots", "used")] == 3
            and samples[("dcpctl_kda_state_slots", "free")] == 5)
    assert "dcpctl_kda_state_slots" not in Metrics(1).render().decode()


def test_auth_runs_before_the_body_is_read(make):
    client, _, _ = make(api_key="sekrit")
    r = client.post("/v1/completions", content=b'{"prompt": ', headers={"Content-Type": "application/json"})
    assert r.status_code == 401 and r.json()["error"]["type"] == "invalid_request_error"
    r = client.post("/v1/completions", content=b"x" * 10000)  # over the 4096-byte limit: still 401 first
    assert r.status_code == 401
    assert client.post("/v1/completions", json={"prompt": "hi"},
                       headers={"Authorization": "Bearer"}).status_code == 401
    assert client.get("/nope").status_code == 401  # every path but /health needs the key


def test_loopback_server_refuses_foreign_host_headers(make):
    from dcpctl.runtime.server.guard import host_allowed, host_name
    client, _, _ = make(allowed_hosts=())
    body = {"prompt": "hi", "max_tokens": 1}
    for host in ("127.0.0.1:30000", "localhost", "[::1]:8000", "app.localhost:1"):
        assert client.post("/v1/completions", json=body, headers={"Host": host}).status_code == 200, host
    r = client.post("/v1/completions", json=body, headers={"Host": "evil.example:30000"})
    assert r.status_code == 403 and "evil.example" in r.json()["error"]["message"]
    assert client.get("/health", headers={"Host": "evil.example"}).status_code == 403
    client, _, _ = make(allowed_hosts=("Box.lan",))
    assert client.post("/v1/completions", json=body, headers={"Host": "box.lan:30000"}).status_code == 200
    assert host_name("[::1]:80") == "::1" and host_name("a:b") == "a:b" and host_allowed("x", None)


def test_unknown_model_is_404_and_unsupported_fields_are_400(make):
    client, _, _ = make()
    r = client.post("/v1/completions", json={"model": "gpt-4", "prompt": "hi"})
    assert r.status_code == 404
    assert r.json()["error"] | {"message": ""} == {"message": "", "type": "invalid_request_error",
                                                   "param": "model", "code": 404}
    assert client.post("/v1/completions",
                       json={"model": "fake", "prompt": "hi", "max_tokens": 1}).status_code == 200
    for path, body, field in [
        ("/v1/completions", {"prompt": "hi", "best_of": 2}, "best_of"),
        ("/v1/completions", {"prompt": "hi", "suffix": "!"}, "suffix"),
        ("/v1/completions", {"prompt": "hi", "presence_penalty": 0.5}, "presence_penalty"),
        ("/v1/completions", {"prompt": "hi", "logprobs": 5}, "logprobs"),
        ("/v1/chat/completions",
         {"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}, "tools"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                  "response_format": {"type": "structural_tag"}}, "response_format"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "logprobs": True,
                                  "top_logprobs": 3}, "top_logprobs"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "http://x"}}]}]}, "messages"),
        ("/generate", {"text": "hi", "sampling_params": {"frequency_penalty": 1}}, "sampling_params"),
    ]:
        r = client.post(path, json=body)
        assert r.status_code == 400, (body, r.text)
        assert field in r.json()["error"]["message"], r.json()
    ok = {"prompt": "hi", "max_tokens": 1, "best_of": 1, "presence_penalty": 0, "logit_bias": {},
          "logprobs": 0}
    assert client.post("/v1/completions", json=ok).status_code == 200


def test_numbers_are_bounded_before_the_engine(make):
    client, _, engine = make()
    for body in ({"prompt": "Hello", "max_tokens": 4, "top_k": 9223372036854775808},
                 {"prompt": "Hello", "max_tokens": 2**70}, {"prompt": "Hello", "seed": -2**63 - 1},
                 {"prompt": "Hello", "top_k": -2}, {"prompt": [2**64]}):
        r = client.post("/v1/completions", json=body)
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error", (body, r.text)
    r = client.post("/generate", json={"text": "hi", "sampling_params": {"top_k": -9223372036854775809}})
    assert r.status_code == 400 and "sampling_params.top_k" in r.json()["error"]["message"]
    r = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 1, "top_k": 2**63 - 1})
    assert r.status_code == 200  # at or above the vocabulary: top-k is off (as vLLM clamps it)


def test_lone_surrogates_are_400_json(make):
    client, _, _ = make()
    for path, body in [("/v1/completions", b'{"prompt": "\\ud800x"}'),
                       ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "\\udfffx"}]}'),
                       ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": [{"type": '
                                                b'"text", "text": "\\ud800"}]}]}'),
                       ("/generate", b'{"text": "a\\ud800", "sampling_params": {"stop": ["\\ud801"]}}'),
                       ("/v1/completions", b'{"prompt": "x", "model": "\\ud800"}')]:
        r = client.post(path, content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and "surrogate" in r.json()["error"]["message"], (body, r.text)


def test_chunked_body_over_the_limit_is_413(make):
    client, _, _ = make()
    chunks = (b'{"prompt": "' + b"x" * 1000 for _ in range(10))  # a generator: sent chunked, no
                                                                 # Content-Length
    r = client.post("/v1/completions", content=chunks, headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and "4096 bytes" in r.json()["error"]["message"]
    small = iter([b'{"prompt": "hi", ', b'"max_tokens": 2}'])
    r = client.post("/v1/completions", content=small, headers={"Content-Type": "application/json"})
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == "ab"


def test_unseeded_requests_draw_fresh_seeds_and_stop_strings_count_as_finished(make):
    import asyncio

    from dcpctl.runtime.server.protocol import CompletionRequest
    from dcpctl.runtime.server.sampling_args import engine_params
    client, _, _ = make()

    def params(**kw):
        body = CompletionRequest(prompt="x", **kw)
        return asyncio.run(engine_params(_State(), body, 4, seed=body.seed, min_tokens=0, logprobs=False))
    assert len({params().seed for _ in range(8)}) == 8
    assert params(seed=7).seed == 7 and params(top_k=300).top_k == -1
    client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 6, "stop": ["cd"]})
    assert 'dcpctl_finished_requests_total{reason="stop"} 1.0' in client.get("/metrics").text


class _State:
    vocab_size = 260
    kv_extra = 0
    json_options: dict = {}


def test_no_parameter_is_both_applied_and_refused():
    """A body field is applied; a NEUTRAL name is refused unless neutral: one name is never both."""
    from dcpctl.runtime.server.params import NEUTRAL
    from dcpctl.runtime.server.protocol import ChatRequest, CompletionRequest, GenerateParams, GenerateRequest
    declared = set().union(*(m.model_fields
                             for m in (CompletionRequest, ChatRequest, GenerateParams, GenerateRequest)))
    assert not set(NEUTRAL) & declared, sorted(set(NEUTRAL) & declared)


def test_logit_rules_are_refused_under_speculative_decoding(make):
    client, _, _ = make(kv_extra=2)          # a speculative server: verification writes 2 rows past decode
    for extra, param in [({"regex": "[0-9]+"}, "regex"), ({"min_tokens": 2}, "min_tokens"),
                         ({"logit_bias": {"5": 1.0}}, "logit_bias"),
                         ({"allowed_token_ids": [5]}, "allowed_token_ids")]:
        r = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2} | extra)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    assert client.post("/v1/completions",
                       json={"prompt": "hi", "max_tokens": 2, "stop_token_ids": [5]}).status_code == 200
