"""How many HTTP worker processes serve the port (`--tokenizer-worker-num`, SGLang's name), decided once.

One worker process streams at most ~14k tokens a second on the H200 machine's CPUs (tools/http_overhead.py:
a fake 1.1 ms step, 32 streams, 68 us of CPU per streamed token; docs/benchmarks.md); past that the stream
arrives in bursts.  A CUDA step is ~1 ms, so on --device cuda the default is one worker per 8 running
requests, at most 4 and at most a quarter of the machine's CPUs: at 32 streams of that step 2 workers held ITL
p50 / p90 at 1.17 / 2.49 ms, 4 workers at 1.18 / 1.62 ms.  On CPU a step takes tens of milliseconds: one
worker.
"""
from __future__ import annotations

import os

STREAMS_PER_WORKER = 8
MAX_AUTO = 4


def http_workers(given: int | None, device: str, max_running: int,
                 cpus: int | None = None) -> tuple[int, str]:
    """(workers, the reason printed once)."""
    if given is not None:
        return given, "--tokenizer-worker-num"
    if device != "cuda":
        return 1, "auto: a CPU engine step takes tens of ms, one worker keeps up"
    cpus = cpus or os.cpu_count() or 1
    want = -(-max_running // STREAMS_PER_WORKER)
    n = max(1, min(want, MAX_AUTO, cpus // 4))
    return n, (f"auto on --device cuda: one per {STREAMS_PER_WORKER} of the {max_running} running requests, "
               f"at most {MAX_AUTO} and a quarter of the {cpus} CPUs; --tokenizer-worker-num to set")
