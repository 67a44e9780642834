"""Counting once, never running a request nobody waits for, and /health's one-token probe (fake engine, no
torch)."""
import asyncio
import time
from collections import Counter

from prometheus_client.parser import text_string_to_metric_families

from dcpctl.runtime.engine.events import Event
from dcpctl.runtime.engine.request import SamplingParams
from dcpctl.runtime.server.bridge import Bridge
from dcpctl.runtime.server.control import Control, NewRequest
from dcpctl.runtime.server.loop import apply
from tests.serve.test_app import make  # noqa: F401  (the fixture)


def _metrics(client) -> dict[str, float]:
    return {s.name + "".join(f"{{{v}}}" for v in s.labels.values()): s.value
            for fam in text_string_to_metric_families(client.get("/metrics").text) for s in fam.samples}


def test_a_disconnect_racing_the_last_token_counts_once():
    counts: Counter = Counter()
    b = Bridge(4, worker=0, workers=2, on_finish=lambda reason: counts.update([reason]))

    async def race():
        rid, _ = b.open([1], SamplingParams())
        b.deliver([Event(rid, 5, 0.0, "length")])      # the engine finished it ...
        assert not b.cancel(rid, "abort")              # ... as its client left: already counted, nothing to
                                                       # cancel
        rid, _ = b.open([1], SamplingParams())
        assert b.cancel(rid, "abort")                  # the client left first ...
        b.deliver([Event(rid, 5, 0.0, "length")])      # ... and the step that ended it ran before the cancel
                                                       # arrived
    asyncio.run(race())
    assert counts == {"length": 1, "abort": 1}
    assert sorted(b.take_ended()) == ["abort", "length"]   # what the other HTTP worker counts, once each


class _Engine:
    def __init__(self):
        self.calls = []

    def submit(self, rid, prompt, params):
        self.calls.append(("submit", rid))

    def cancel(self, rid):
        self.calls.append(("cancel", rid))


def test_a_request_cancelled_in_the_message_that_brings_it_never_runs():
    e = _Engine()
    apply(e,
          Control(new=[NewRequest(1, [1], SamplingParams()), NewRequest(2, [1], SamplingParams())],
                  cancel=[1]))
    assert e.calls == [("cancel", 1), ("submit", 2)]


def test_health_generates_one_token_that_metrics_do_not_count(make):
    client, _, engine = make()
    assert client.get("/health").text == "ok"
    m = _metrics(client)
    assert m["dcpctl_generated_tokens_total"] == 0 and not any(k.startswith("dcpctl_finished") for k in m), m
    assert not engine.live


def test_health_is_503_while_the_engine_makes_no_token_and_200_once_it_does(make):
    client, _, engine = make(hold=True, health_timeout_s=0.5)
    t0 = time.monotonic()
    r = client.get("/health")
    assert r.status_code == 503 and "no token within 0.5 s" in r.json()["error"]["message"]
    assert 0.5 <= time.monotonic() - t0 < 3
    deadline = time.monotonic() + 5
    while not engine.cancelled and time.monotonic() < deadline:   # the probe that gave up is cancelled
        time.sleep(0.01)
    assert engine.cancelled and all(rid < 0 for rid in engine.cancelled) and not engine.live
    engine.hold = False
    assert client.get("/health").text == "ok"


def test_health_of_a_full_server_is_answered_by_the_tokens_it_streams(make):
    client, bridge, _ = make(max_outstanding=1, health_timeout_s=5.0)

    async def occupy():
        bridge.open([1], SamplingParams(max_new_tokens=1 << 20))     # the one slot, streaming for ever
    asyncio.run(occupy())
    t0 = time.monotonic()
    assert client.get("/health").text == "ok" and time.monotonic() - t0 < 2
