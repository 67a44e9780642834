"""`dcpctl bench serve`: load an OpenAI-compatible server and measure throughput, TTFT and ITL.

Streamed /v1/completions of random token-id prompts (`ignore_eos`, greedy): --requests of them, arriving at
--request-rate (Poisson, seeded) or all at once, at most --concurrency in flight, optionally over a background
of decoding streams (bench/serve_load.py says what is sent and how each metric is computed).  Standard library
HTTP only (no client dependency); the streams are spread over client processes so that parsing tokens does not
bunch the arrival stamps being measured.
"""
from __future__ import annotations

import json
import math
import statistics
import time
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dcpctl.bench.serve_clients import Clients, take
from dcpctl.bench.serve_load import Item, Sample, metrics, workload
from dcpctl import console
from dcpctl.plan.errors import positive_ints
from dcpctl.plan.errors import UserError


def _pct(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {"mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0}
    s = sorted(xs)
    at = lambda q: s[min(len(s) - 1, int(q * len(s)))] * 1e3  # noqa: E731
    return {"mean": statistics.fmean(s) * 1e3, "p50": at(0.50), "p90": at(0.90), "p99": at(0.99)}


def run_bench(url: str, concurrency: int, requests: int, input_len: int, output_len: int, api_key: str | None,
              seed: int, vocab: int, timeout: float, quiet: bool = False, processes: int = 0,
              request_rate: float = math.inf, range_ratio: float = 0.0, background: int = 0,
              bg_input_len: int = 32, bg_output_len: int = 1024, stop: list[str] | None = None,
              output_lens: list[int] | None = None) -> dict[str, Any]:
    """The workload of bench/serve_load.py against `url`; one JSON-able report (module docstring)."""
    items = workload(requests, input_len, output_len, range_ratio, request_rate, seed, vocab, background,
                     bg_input_len, bg_output_len, output_lens)
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {api_key}"}
                                                      if api_key else {})
    bodies = [{"prompt": it.prompt, "max_tokens": it.max_tokens, "temperature": 0, "stream": True,
               "ignore_eos": True, "stream_options": {"include_usage": True},
               **({"stop": stop} if stop and it.cls == "arrival" else {})}
              for it in items]
    clients = Clients(url, headers, bodies, concurrency, background, timeout, processes)
    samples: dict[int, Sample] = {}
    with Progress(TextColumn("bench serve"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console.err, transient=True, disable=quiet) as bar:
        task = bar.add_task("requests", total=len(items))
        step = lambda wait: take(clients.done, samples, wait, lambda: bar.advance(task))  # noqa: E731
        started = set()
        for i in range(background):
            clients.todo_bg.put(i)
        while len(started | set(samples)) < background:      # the arrival clock starts on a decoding
                                                             # background
            started |= step(None)
        t0 = time.perf_counter()
        for i in range(background, len(items)):
            while (left := t0 + items[i].at - time.perf_counter()) > 0:
                step(left)
            clients.todo.put(i)
        while len(samples) < len(items):
            step(None)
        duration = time.perf_counter() - t0
    clients.stop()
    return _report(url, items, [samples[i] for i in range(len(items))], duration, concurrency, clients.n_proc,
                   request_rate, input_len, output_len, background)


def _report(url: str, items: list[Item], samples: list[Sample], duration: float, concurrency: int,
            n_proc: int, rate: float, input_len: int, output_len: int, background: int) -> dict[str, Any]:
    ok = [s for s in samples if s.ok]
    arrivals = [(it, s) for it, s in zip(items, samples) if it.cls == "arrival"]
    out = {"url": url, "concurrency": concurrency, "max_concurrency": concurrency,
           "request_rate": rate if math.isfinite(rate) else "inf", "requests": len(arrivals),
           "input_len": input_len, "output_len": output_len, "client_processes": n_proc,
           "errors": sorted({s.error for s in samples if not s.ok})[:5], "duration": duration,
           "duration_s": duration, **metrics(items, samples, duration),
           # the first names of this report, kept for the scripts that read them
           "output_token_throughput": sum(s.output_tokens for s in ok) / duration,
           "ttft_ms": _pct([s.ttft for s in ok]), "itl_ms": _pct([x for s in ok for x in s.itl]),
           "e2e_latency_ms": _pct([s.latency for s in ok])}
    if background:
        bg = [(it, s) for it, s in zip(items, samples) if it.cls == "background"]
        out["background_streams"] = background
        out["classes"] = {name: metrics([it for it, _ in pairs], [s for _, s in pairs], duration)
                          for name, pairs in (("background", bg), ("arrival", arrivals))}
    return out


@click.command()
@click.option("--url", required=True, help="Server base URL, e.g. http://127.0.0.1:30000")
@click.option("--concurrency", type=click.IntRange(min=1), default=8, show_default=True,
              help="Parallel clients.")
@click.option("--requests", "num_requests", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--input-len", type=click.IntRange(min=1), default=32, show_default=True,
              help="Prompt token ids.")
@click.option("--output-len", type=click.IntRange(min=1), default=32, show_default=True, help="max_tokens.")
@click.option("--api-key", envvar="DCPCTL_API_KEY", help="Bearer key (or $DCPCTL_API_KEY).")
@click.option("--vocab", type=click.IntRange(min=2), default=256, show_default=True,
              help="Prompt ids are drawn from [1, vocab).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--timeout", type=float, default=600.0, show_default=True, help="Seconds per request.")
@click.option("--client-processes", type=click.IntRange(min=0), default=0, show_default=True,
              help="Client processes sharing the streams; 0: one per 8 streams (one Python process cannot "
                   "parse tens of thousands of streamed tokens a second without bunching their arrival "
                   "times).")
@click.option("--request-rate", type=click.FloatRange(min=0, min_open=True), default=math.inf,
              show_default=True, help="Requests per second, a Poisson process seeded by --seed; inf: all at "
                   "once (at most --concurrency in flight either way).")
@click.option("--random-range-ratio", type=click.FloatRange(0, 1, max_open=True), default=0.0,
              show_default=True,
              help="Input and output lengths uniform in [len * (1 - r), len * (1 + r)] (vLLM's rule).")
@click.option("--background-streams", type=click.IntRange(min=0), default=0, show_default=True,
              help="Decoding streams sent first; the requests arrive once they all stream (reported per "
                   "class).")
@click.option("--background-input-len", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--background-output-len", type=click.IntRange(min=1), default=1024, show_default=True)
@click.option("--stop", multiple=True, help="A stop string of the requests (repeatable): they may end before "
                                        "max_tokens, as clients' requests do.")
@click.option("--output-lens", metavar="N,N,...", help="Each request's max_tokens, in order (e.g. a run's "
                                                       "output_lens: the same prompts for the same --seed).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def command(url: str, concurrency: int, num_requests: int, input_len: int, output_len: int,
            api_key: str | None, vocab: int, seed: int, timeout: float, client_processes: int,
            request_rate: float, random_range_ratio: float, background_streams: int,
            background_input_len: int, background_output_len: int, stop: tuple[str, ...],
            output_lens: str | None, fmt: str) -> None:
    """Load a running server (`dcpctl launch`) with streamed completions; report throughput, TTFT
    and inter-token latency percentiles (vLLM's metric names in the JSON).

    \b
    Examples:
      dcpctl bench serve --url http://127.0.0.1:30000 --concurrency 8 --requests 64 --input-len 32 \\
          --output-len 32
      dcpctl bench serve --url URL --request-rate 4 --random-range-ratio 0.5 --requests 100 --concurrency 32
      dcpctl bench serve --url URL --background-streams 8 --background-output-len 4000 \\
          --requests 4 --input-len 16000 --output-len 16 --request-rate 0.5     # long prompts arrive
    """
    _check_reachable(url)
    lens = positive_ints(output_lens, "output-lens", "lengths") if output_lens else None
    if lens is not None and len(lens) != num_requests:
        raise UserError(f"--output-lens has {len(lens)} lengths for --requests {num_requests}")
    r = run_bench(url, concurrency, num_requests, input_len, output_len, api_key, seed, vocab, timeout,
                  quiet=fmt == "json", processes=client_processes, request_rate=request_rate,
                  range_ratio=random_range_ratio, background=background_streams,
                  bg_input_len=background_input_len, bg_output_len=background_output_len, stop=list(stop),
                  output_lens=lens)
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
        raise UserError(f"cannot connect to {url}: {e.strerror or e}; is the server up (`dcpctl "
                        "launch`)?") from None


def _print(r: dict[str, Any]) -> None:
    console.out.print(f"{r['completed']}/{r['completed'] + r['failed']} requests in {r['duration']:.2f} s "
                      f"(concurrency {r['concurrency']}, rate {r['request_rate']}, input {r['input_len']}, "
                      f"output {r['output_len']})")
    console.out.print(f"throughput: {r['request_throughput']:.2f} req/s, {r['output_throughput']:.1f} output "
                      f"tok/s, {r['total_token_throughput']:.1f} total tok/s")
    for name, m in [("all", r)] + list(r.get("classes", {}).items()):
        rows = [[what, *(f"{m[f'{k}_{key}_ms']:.1f}" for k in ("mean", "median", "p90", "p99"))]
                for what, key in (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"),
                                  ("E2E latency", "e2el"))]
        console.out.print(console.table(f"latency (ms): {name}", ["metric", "mean", "median", "p90", "p99"],
                                        rows))
    for e in r["errors"]:
        console.warn(e)
