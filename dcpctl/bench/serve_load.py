"""What `dcpctl bench serve` sends and how it reports it: requests with arrival times, and vLLM's serving
metrics.

Workload (pure, seeded):
  requests    --requests prompts of --input-len ids and max_tokens --output-len, each drawn uniformly from
              [len * (1 - r), len * (1 + r)] with r = --random-range-ratio (vLLM's rule); they arrive as a
              Poisson process of --request-rate per second (exponential gaps, vLLM's burstiness 1), or all at
              once (inf), and at most --concurrency are in flight
  background  --background-streams requests of --background-input-len / --background-output-len sent first;
              the arrival clock starts once every one of them streams (a decoding background that the
              arrivals disturb); reported as a class of their own

Metrics: vLLM's `vllm bench serve` names (SGLang's bench_serving uses the same ones): request_throughput,
output_throughput, total_token_throughput, {mean,median,std,p90,p99,max}_{ttft,tpot,itl,e2el}_ms, percentiles
interpolated linearly as numpy does; TPOT = (E2E - TTFT) / (output tokens - 1) per request.
"""
from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Item:
    cls: str              # "arrival" or "background"
    prompt: list[int]
    max_tokens: int
    at: float             # seconds after the arrival clock starts (background: sent before it)


@dataclass
class Sample:
    ok: bool
    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    latency: float = 0.0
    output_tokens: int = 0
    error: str = ""


def lengths(rng: random.Random, n: int, mean: int, ratio: float) -> list[int]:
    """n lengths uniform in [mean * (1 - ratio), mean * (1 + ratio)], at least 1."""
    lo, hi = max(1, int(mean * (1 - ratio))), max(1, int(mean * (1 + ratio)))
    return [rng.randint(lo, hi) for _ in range(n)]


def workload(requests: int, input_len: int, output_len: int, ratio: float, rate: float, seed: int, vocab: int,
             background: int = 0, bg_input: int = 32, bg_output: int = 1024,
             output_lens: list[int] | None = None) -> list[Item]:
    """Background items first (at 0), then the arrivals in time order (module docstring); `output_lens` gives
    each arrival's max_tokens instead (a replay of a run's `output_lens`, same prompts for the same seed)."""
    rng = random.Random(seed)
    ids = lambda n: [rng.randrange(1, vocab) for _ in range(n)]  # noqa: E731
    items = [Item("background", ids(bg_input), bg_output, 0.0) for _ in range(background)]
    t = 0.0
    ins, outs = lengths(rng, requests, input_len, ratio), lengths(rng, requests, output_len, ratio)
    for n, m in zip(ins, output_lens or outs):
        items.append(Item("arrival", ids(n), m, t))
        if math.isfinite(rate):
            t += rng.expovariate(rate)
    return items


def percentile(xs: list[float], q: float) -> float:
    """numpy's default (linear) percentile q in [0, 100] of a non-empty list."""
    s = sorted(xs)
    k = (len(s) - 1) * q / 100
    lo = math.floor(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _stats(name: str, xs: list[float]) -> dict[str, float]:
    ms = [x * 1e3 for x in xs] or [0.0]
    return {f"mean_{name}_ms": statistics.fmean(ms), f"median_{name}_ms": percentile(ms, 50),
            f"std_{name}_ms": statistics.pstdev(ms), f"p90_{name}_ms": percentile(ms, 90),
            f"p99_{name}_ms": percentile(ms, 99), f"max_{name}_ms": max(ms)}


def metrics(items: list[Item], samples: list[Sample], duration: float) -> dict[str, float | int]:
    """vLLM's serving metrics of these (item, sample) pairs over `duration` seconds."""
    ok = [(it, s) for it, s in zip(items, samples) if s.ok]
    out_tokens = sum(s.output_tokens for _, s in ok)
    in_tokens = sum(len(it.prompt) for it, _ in ok)
    tpot = [(s.latency - s.ttft) / (s.output_tokens - 1) for _, s in ok if s.output_tokens > 1]
    return {"completed": len(ok), "failed": len(samples) - len(ok), "total_input_tokens": in_tokens,
            "input_lens": [len(it.prompt) for it in items], "output_lens": [s.output_tokens for s in samples],
            "total_output_tokens": out_tokens, "request_throughput": len(ok) / duration,
            "output_throughput": out_tokens / duration,
            "total_token_throughput": (in_tokens + out_tokens) / duration,
            **_stats("ttft", [s.ttft for _, s in ok]), **_stats("tpot", tpot),
            **_stats("itl", [x for _, s in ok for x in s.itl]), **_stats("e2el", [s.latency for _, s in ok])}
