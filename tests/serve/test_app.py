"""The HTTP app without torch.distributed: a fake engine thread drives the real Bridge."""
import threading
import time

import pytest
from starlette.testclient import TestClient

from dcpctl.runtime.engine.events import Event, ReplicaStats
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

    def _make(api_key=None, max_outstanding=8, hold=False):
        bridge, metrics = Bridge(max_outstanding), Metrics(1)
        state = ServerState(bridge, ByteTokenizer(), "fake", 260, 64, 48, metrics, api_key, 4096)
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
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    assert client.post("/v1/completions", json=body, headers={"Authorization": "Bearer nope"}).status_code == 401
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


async def _occupy(bridge):
    from dcpctl.runtime.engine.request import SamplingParams
    bridge.open([1], SamplingParams())


def test_context_and_capacity_limits_name_the_numbers(make):
    client, _, _ = make()
    r = client.post("/v1/completions", json={"prompt": [1] * 40, "max_tokens": 10})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == ("prompt (40 tokens) + max_tokens (10) = 50 exceeds the KV capacity "
                                            "(48 tokens)")
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


def test_plain_chat_template():
    ids = chat_prompt(ByteTokenizer(), [{"role": "user", "content": "hi"}])
    assert ids[0] == ByteTokenizer.bos_token_id and bytes(ids[1:]).decode() == "<|user|>\nhi\n<|assistant|>\n"


def test_kda_ceiling_in_metrics():
    from types import SimpleNamespace

    from prometheus_client.parser import text_string_to_metric_families
    pool = SimpleNamespace(used=3, free=5)
    text = Metrics(1, kda_pool=pool).render().decode()
    samples = {(s.name, s.labels.get("state")): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert samples[("dcpctl_kda_state_slots", "used")] == 3 and samples[("dcpctl_kda_state_slots", "free")] == 5
    assert "dcpctl_kda_state_slots" not in Metrics(1).render().decode()
