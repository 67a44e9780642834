"""The HTTP side's share of the first request's TTFT: the real frontend processes, a fake engine loop.

Starts `Frontend` (--tokenizer-worker-num WORKERS HTTP processes, primed as `dcpctl launch` primes them) with
a fake engine that answers every request with one token a millisecond, then runs `dcpctl bench serve` (a fresh
client process each time) with 1, 5, 1, 5 requests of PROMPT token ids and 2 output tokens: the first line is
the first request after start, the others are steady.  Prints one JSON line per run.

usage: python3 -m tools.http_first_ttft [--workers 4] [--prompt 1000]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=1000)
    a = ap.parse_args()
    from tools.http_overhead import fake_frontend, fake_loop
    front, stop = fake_frontend(a.workers), threading.Event()
    threading.Thread(target=fake_loop, args=(front, stop, 0.001, []), daemon=True).start()
    try:
        for n in (1, 5, 1, 5):
            out = subprocess.run([sys.executable, "-m", "dcpctl.cli.main", "bench", "serve", "--url",
                                  front.url, "--concurrency", "1", "--requests", str(n), "--input-len",
                                  str(a.prompt), "--output-len", "2", "--format", "json"],
                                 capture_output=True, text=True)
            print(json.dumps({"requests": n, "ttft_ms": json.loads(out.stdout)["ttft_ms"]}), flush=True)
    finally:
        stop.set()
        front.stop()


if __name__ == "__main__":
    main()
