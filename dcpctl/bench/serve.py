"""`dcpctl bench serve`: load an OpenAI-compatible server and measure throughput, TTFT and ITL.

Each client thread sends streamed /v1/completions with a random token-id prompt of --input-len
ids and `max_tokens = --output-len` (`ignore_eos`, greedy), one request after another, until
--requests have been sent in all.  Standard library HTTP only (no client dependency).
"""
from __future__ import annotations

import http.client
import json
import random
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dcpctl import console


@dataclass
class Sample:
    ok: bool
    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    latency: float = 0.0
    output_tokens: int = 0
    error: str = ""


def _one(url: str, headers: dict[str, str], body: dict[str, Any], timeout: float) -> Sample:
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
    t0 = time.perf_counter()
    try:
        conn.request("POST", (u.path.rstrip("/") or "") + "/v1/completions", json.dumps(body), headers)
        resp = conn.getresponse()
        if resp.status != 200:
            return Sample(False, error=f"HTTP {resp.status}: {resp.read()[:200]!r}")
        stamps, tokens = [], 0
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices"):
                stamps.append(time.perf_counter())
            elif chunk.get("usage"):
                tokens = int(chunk["usage"]["completion_tokens"])
        if not stamps:
            return Sample(False, error="no tokens streamed")
        itl = [b - a for a, b in zip(stamps, stamps[1:])]
        return Sample(True, stamps[0] - t0, itl, stamps[-1] - t0, tokens or len(stamps))
    except (OSError, http.client.HTTPException, ValueError) as e:
        return Sample(False, error=f"{type(e).__name__}: {e}")
    finally:
        conn.close()


def _pct(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {"mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0}
    s = sorted(xs)
    at = lambda q: s[min(len(s) - 1, int(q * len(s)))] * 1e3  # noqa: E731
    return {"mean": statistics.fmean(s) * 1e3, "p50": at(0.50), "p90": at(0.90), "p99": at(0.99)}


STREAMS_PER_PROCESS = 8   # client threads per process: one Python process parses ~10k SSE events a second


def client_processes(concurrency: int, given: int) -> int:
    """How many client processes share the streams: `given`, or one per STREAMS_PER_PROCESS streams (0)."""
    return max(1, min(concurrency, given or -(-concurrency // STREAMS_PER_PROCESS)))


def _client_main(url: str, headers: dict[str, str], bodies: list[dict[str, Any]], threads: int, timeout: float,
                 todo: Any, done: Any) -> None:
    """One client process: `threads` streams, each taking the next request index until a None."""
    def stream() -> None:
        while (i := todo.get()) is not None:
            done.put((i, _one(url, headers, bodies[i], timeout)))
    workers = [threading.Thread(target=stream, daemon=True) for _ in range(threads)]
    done.put(None)                          # this process is up: the clock starts when all are
    for t in workers:
        t.start()
    for t in workers:
        t.join()


def run_bench(url: str, concurrency: int, requests: int, input_len: int, output_len: int, api_key: str | None,
              seed: int, vocab: int, timeout: float, quiet: bool = False, processes: int = 0) -> dict[str, Any]:
    """`concurrency` streams over `processes` client processes (0: one per 8 streams), so that at high token
    rates the client's own parsing (GIL) does not bunch the arrival stamps it measures."""
    import multiprocessing as mp
    rng = random.Random(seed)
    prompts = [[rng.randrange(1, vocab) for _ in range(input_len)] for _ in range(requests)]
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {api_key}"} if api_key else {})
    bodies = [{"prompt": p, "max_tokens": output_len, "temperature": 0, "stream": True, "ignore_eos": True,
               "stream_options": {"include_usage": True}} for p in prompts]
    n_proc = client_processes(concurrency, processes)
    ctx = mp.get_context("spawn")
    todo, done = ctx.Queue(), ctx.Queue()
    shares = [concurrency // n_proc + (i < concurrency % n_proc) for i in range(n_proc)]
    procs = [ctx.Process(target=_client_main, args=(url, headers, bodies, k, timeout, todo, done), daemon=True)
             for k in shares]
    for p in procs:
        p.start()
    for _ in procs:
        done.get()
    samples: list[Sample] = []
    with Progress(TextColumn("bench serve"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console.err, transient=True, disable=quiet) as bar:
        task = bar.add_task("requests", total=requests)
        t0 = time.perf_counter()
        for i in range(requests):
            todo.put(i)
        for _ in range(concurrency):
            todo.put(None)
        for _ in range(requests):
            samples.append(done.get()[1])
            bar.advance(task)
        duration = time.perf_counter() - t0
    for p in procs:
        p.join()
    ok = [s for s in samples if s.ok]
    out_tokens = sum(s.output_tokens for s in ok)
    return {"url": url, "concurrency": concurrency, "requests": requests, "input_len": input_len,
            "output_len": output_len, "client_processes": n_proc, "completed": len(ok),
            "failed": len(samples) - len(ok),
            "errors": sorted({s.error for s in samples if not s.ok})[:5], "duration_s": duration,
            "request_throughput": len(ok) / duration, "output_token_throughput": out_tokens / duration,
            "total_token_throughput": (out_tokens + input_len * len(ok)) / duration,
            "ttft_ms": _pct([s.ttft for s in ok]), "itl_ms": _pct([x for s in ok for x in s.itl]),
            "e2e_latency_ms": _pct([s.latency for s in ok])}


@click.command()
@click.option("--url", required=True, help="Server base URL, e.g. http://127.0.0.1:30000")
@click.option("--concurrency", type=click.IntRange(min=1), default=8, show_default=True, help="Parallel clients.")
@click.option("--requests", "num_requests", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--input-len", type=click.IntRange(min=1), default=32, show_default=True, help="Prompt token ids.")
@click.option("--output-len", type=click.IntRange(min=1), default=32, show_default=True, help="max_tokens.")
@click.option("--api-key", envvar="DCPCTL_API_KEY", help="Bearer key (or $DCPCTL_API_KEY).")
@click.option("--vocab", type=click.IntRange(min=2), default=256, show_default=True,
              help="Prompt ids are drawn from [1, vocab).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--timeout", type=float, default=600.0, show_default=True, help="Seconds per request.")
@click.option("--client-processes", type=click.IntRange(min=0), default=0, show_default=True,
              help="Client processes sharing the streams; 0: one per 8 streams (one Python process cannot parse "
                   "tens of thousands of streamed tokens a second without bunching their arrival times).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def command(url: str, concurrency: int, num_requests: int, input_len: int, output_len: int, api_key: str | None,
            vocab: int, seed: int, timeout: float, client_processes: int, fmt: str) -> None:
    """Load a running server (`dcpctl launch`) with streamed completions; report throughput, TTFT
    and inter-token latency percentiles.

    \b
    Example:
      dcpctl bench serve --url http://127.0.0.1:30000 --concurrency 8 --requests 64 --input-len 32 --output-len 32
    """
    _check_reachable(url)
    r = run_bench(url, concurrency, num_requests, input_len, output_len, api_key, seed, vocab, timeout,
                  quiet=fmt == "json", processes=client_processes)
    if fmt == "json":
        console.write_text(json.dumps(r))
    else:
        _print(r)
    if r["completed"] == 0:
        raise SystemExit(1)


def _check_reachable(url: str) -> None:
    """A wrong --url or a server that is not up is one line and exit 2, not 64 failed requests."""
    import socket
    from urllib.parse import urlsplit

    from dcpctl.plan.errors import UserError
    u = urlsplit(url)
    try:
        port = u.port or (443 if u.scheme == "https" else 80)
    except ValueError:
        port = -1
    if u.scheme not in ("http", "https") or not u.hostname or port < 0:
        raise UserError(f"--url must look like http://HOST:PORT, got {url!r}")
    try:
        socket.create_connection((u.hostname, port), timeout=10).close()
    except OSError as e:
        raise UserError(f"cannot connect to {url}: {e.strerror or e}; is the server up (`dcpctl launch`)?") from None


def _print(r: dict[str, Any]) -> None:
    console.out.print(f"{r['completed']}/{r['requests']} requests in {r['duration_s']:.2f} s "
                      f"(concurrency {r['concurrency']}, input {r['input_len']}, output {r['output_len']})")
    console.out.print(f"throughput: {r['request_throughput']:.2f} req/s, {r['output_token_throughput']:.1f} output "
                      f"tok/s, {r['total_token_throughput']:.1f} total tok/s")
    rows = [[name, *(f"{r[key][k]:.1f}" for k in ("mean", "p50", "p90", "p99"))]
            for name, key in (("TTFT", "ttft_ms"), ("ITL", "itl_ms"), ("E2E latency", "e2e_latency_ms"))]
    console.out.print(console.table("latency (ms)", ["metric", "mean", "p50", "p90", "p99"], rows))
    for e in r["errors"]:
        console.warn(e)
