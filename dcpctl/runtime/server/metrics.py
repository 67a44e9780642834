"""Prometheus metrics of rank 0's server (one registry per server, no module-level singletons).

The engine reports after every loop turn (a step, or the idle heartbeat every 0.2 s); the request and
page gauges are as of that report.  `dcpctl_engine_report_age_seconds` says how old it is: it grows
through a long step (a long prefill) or while a rank hangs, when those gauges are stale.  Finished
requests are counted by the bridge (bridge.py: once each); /health's probes (negative ids) are not counted.
"""
from __future__ import annotations

import time
from collections import deque
from typing import Any, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from dcpctl.runtime.engine.events import Event, ReplicaStats

STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
RATE_WINDOW_S = 10.0


class Metrics:
    def __init__(self, attn_tp_size: int, exchange_seconds: Callable[[], float] = lambda: 0.0,
                 kda_pool: Any = None, open_requests: Callable[[], int] | None = None) -> None:
        r = self.registry = CollectorRegistry()
        self.running = Gauge("dcpctl_running_requests", "Requests holding KV pages (all replicas)",
                             registry=r)
        self.queued = Gauge("dcpctl_queued_requests", "Requests waiting for admission (all replicas)",
                            registry=r)
        self.pages_used = Gauge("dcpctl_kv_pages_used", "KV pages in use", ["rank"], registry=r)
        self.pages_free = Gauge("dcpctl_kv_pages_free", "Free KV pages", ["rank"], registry=r)
        self.tps = Gauge("dcpctl_tokens_per_second", f"Generated tokens per second over the last "
                         f"{RATE_WINDOW_S:.0f} s", registry=r)
        self.tokens = Counter("dcpctl_generated_tokens", "Generated tokens", registry=r)
        self.finished = Counter("dcpctl_finished_requests", "Finished requests", ["reason"], registry=r)
        self.retracted = Counter("dcpctl_retracted_requests", "Requests retracted to free KV pages (they "
                                 "recompute their tokens when readmitted)", registry=r)
        self._retracted_seen = 0      # the replicas' cumulative count at the last step
        self.step = Histogram("dcpctl_step_seconds", "Wall time of one engine step that ran a batch",
                              buckets=STEP_BUCKETS, registry=r)
        self.exchange = Gauge("dcpctl_dcp_exchange_seconds_total",
                              "Wall time rank 0 spent in the DCP exchange (query gather + merge)", registry=r)
        self.exchange.set_function(exchange_seconds)
        if kda_pool is not None:  # hybrids: request-indexed KDA state is the concurrency ceiling (not DCP)
            slots = Gauge("dcpctl_kda_state_slots", "KDA state slots of rank 0's replica: the concurrency "
                          "ceiling of a hybrid model, unchanged by DCP", ["state"], registry=r)
            slots.labels("used").set_function(lambda: kda_pool.used)
            slots.labels("free").set_function(lambda: kda_pool.free)
        self.reported = time.monotonic()
        Gauge("dcpctl_engine_report_age_seconds", "Seconds since the engine loop last reported (each step, "
              "and every 0.2 s when idle): the request and page gauges are as of then", registry=r
              ).set_function(lambda: time.monotonic() - self.reported)
        if open_requests is not None:
            Gauge("dcpctl_http_open_requests", "Requests this HTTP worker holds open (queued, running, or "
                  "not yet seen by the engine)", registry=r).set_function(open_requests)
        self._recent: deque[tuple[float, int]] = deque()
        self._recent_tokens = 0       # the sum over _recent, kept as it changes (a step must not walk 10 s of
                                      # steps)
        self._pages: list[tuple[Any, Any]] = []   # per rank: its (used, free) gauge children, made once
        self.attn_tp_size = attn_tp_size

    def on_step(self, events: list[Event], stats: list[ReplicaStats], step_s: float) -> None:
        # stats: one entry per global rank; replica i's ranks [i*attn_tp, (i+1)*attn_tp) share an allocator
        replicas = stats[::self.attn_tp_size]
        self.running.set(sum(s.running for s in replicas))
        self.queued.set(sum(s.waiting for s in replicas))
        retracted = sum(s.retractions for s in replicas)
        if retracted > self._retracted_seen:
            self.retracted.inc(retracted - self._retracted_seen)
            self._retracted_seen = retracted
        while len(self._pages) < len(stats):
            rank = str(len(self._pages))
            self._pages.append((self.pages_used.labels(rank), self.pages_free.labels(rank)))
        for (used, free), s in zip(self._pages, stats):
            used.set(s.num_pages - s.free_pages)
            free.set(s.free_pages)
        if step_s > 0:
            self.step.observe(step_s)
        now = self.reported = time.monotonic()
        n = sum(ev.rid >= 0 for ev in events)     # not /health's probes
        if n:
            self.tokens.inc(n)
            self._recent.append((now, n))
            self._recent_tokens += n
        while self._recent and self._recent[0][0] < now - RATE_WINDOW_S:
            self._recent_tokens -= self._recent.popleft()[1]
        self.tps.set(self._recent_tokens / RATE_WINDOW_S)

    def render(self) -> bytes:
        return generate_latest(self.registry)

