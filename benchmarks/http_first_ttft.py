"""The HTTP side's share of the first request's TTFT: the real frontend processes, a fake engine loop.

Starts `Frontend` (--tokenizer-worker-num WORKERS HTTP processes, primed as `dcpctl launch` primes them) with a
fake engine that answers every request with one token a millisecond, then runs `dcpctl bench serve` (a fresh
client process each time) with 1, 5, 1, 5 requests of PROMPT token ids and 2 output tokens: the first line is the
first request after start, the others are steady.  Prints one JSON line per run.

usage: PYTHONPATH=. python3 benchmarks/http_first_ttft.py [--workers 4] [--prompt 1000]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=1000)
    a = ap.parse_args()
    from dcpctl.runtime.engine.events import Event, ReplicaStats
    from dcpctl.runtime.server.frontend import Frontend, FrontendSpec
    from dcpctl.runtime.tokenizer import MARKER
    tok = Path(tempfile.mkdtemp())
    (tok / MARKER).write_text("")
    front = Frontend(FrontendSpec("127.0.0.1", 0, None, 1 << 20, None, "fake", str(tok), 264, 1 << 20, 1 << 24, 1,
                                  4096, False, int(time.time()), workers=a.workers))
    stop = threading.Event()

    def loop() -> None:
        running: dict[int, int] = {}
        while not stop.is_set():
            msg = front.take(wait=not running)
            for r in msg.new:
                running[r.rid] = r.params.max_new_tokens
            events = []
            for rid in list(running):
                running[rid] -= 1
                events.append(Event(rid, 65, -0.5, "" if running[rid] else "length"))
                if not running[rid]:
                    del running[rid]
            front.on_step(events, [ReplicaStats(0, len(running), 100, 100)], 0.001 if events else 0.0)
            time.sleep(0.001)
    threading.Thread(target=loop, daemon=True).start()
    try:
        for n in (1, 5, 1, 5):
            out = subprocess.run([sys.executable, "-m", "dcpctl.cli.main", "bench", "serve", "--url", front.url,
                                  "--concurrency", "1", "--requests", str(n), "--input-len", str(a.prompt),
                                  "--output-len", "2", "--format", "json"], capture_output=True, text=True)
            print(json.dumps({"requests": n, "ttft_ms": json.loads(out.stdout)["ttft_ms"]}), flush=True)
    finally:
        stop.set()
        front.stop()


if __name__ == "__main__":
    main()
