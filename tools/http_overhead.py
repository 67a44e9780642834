"""What the HTTP side costs a streamed decode, without a GPU: the real frontend processes, a fake engine loop.

The fake loop runs like server/loop.run_loop on rank 0: take the control message, then every --step-us
emit one token per running request through `Frontend.on_step` (the real pipe, the real HTTP worker
processes, --tokenizer-worker-num of them).  `dcpctl bench serve` (separate client processes) streams
against it: ITL p50 against the fake step is what the HTTP side adds, and the frontends' CPU seconds per
streamed token is what one token costs there.  Prints one JSON line per (workers, concurrency) and writes
them all to --out.

usage: python3 -m tools.http_overhead [--concurrency 8,32] [--workers 1,2,4] [--step-us 1100]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def fake_loop(front, stop: threading.Event, step_s: float, steps: list) -> None:
    from dcpctl.runtime.engine.events import Event, ReplicaStats
    running: dict[int, list] = {}     # rid -> [tokens left]
    stats = [ReplicaStats(0, 0, 1024, 1024)]
    while not stop.is_set():
        msg = front.take(wait=not running)
        for r in msg.new:
            running[r.rid] = [r.params.max_new_tokens]
        for rid in msg.cancel:
            running.pop(rid, None)
        t0 = time.perf_counter()
        events = []
        for rid, left in list(running.items()):
            left[0] -= 1
            done = left[0] == 0
            events.append(Event(rid, 65 + rid % 26, -0.5, "length" if done else ""))
            if done:
                del running[rid]
        front.on_step(events, stats, step_s if events else 0.0)
        if events:
            while time.perf_counter() - t0 < step_s:   # the GPU's share of a step
                time.sleep(max(0.0, step_s - (time.perf_counter() - t0)) * 0.5)
            steps.append(time.perf_counter() - t0)


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fake_frontend(workers: int):
    """The real Frontend (`workers` HTTP processes, byte tokenizer) for a fake engine loop to drive."""
    from dcpctl.runtime.server.frontend import Frontend, FrontendSpec
    from dcpctl.runtime.tokenizer import MARKER
    tok = Path(tempfile.mkdtemp())
    (tok / MARKER).write_text("")
    return Frontend(FrontendSpec("127.0.0.1", 0, None, 1 << 20, None, "fake", str(tok), 264, 1 << 20, 1 << 24,
                                 1, 4096, False, int(time.time()), workers=workers))


def run(workers: int, concurrencies: list[int], step_s: float, output_len: int,
        client_procs: int) -> list[dict]:
    front = fake_frontend(workers)
    stop, steps, rows = threading.Event(), [], []
    threading.Thread(target=fake_loop, args=(front, stop, step_s, steps), daemon=True).start()
    try:
        for c in concurrencies:
            steps.clear()
            cpu0 = sum(_cpu_s(w.proc.pid) for w in front.workers)
            out = subprocess.run([sys.executable, "-m", "dcpctl.cli.main", "bench", "serve", "--url",
                                  front.url, "--concurrency", str(c), "--requests", str(4 * c), "--input-len",
                                  "16", "--output-len", str(output_len), "--client-processes",
                                  str(client_procs), "--format", "json"], capture_output=True, text=True)
            cpu = sum(_cpu_s(w.proc.pid) for w in front.workers) - cpu0
            doc = json.loads(out.stdout) if out.returncode == 0 else {"error": out.stderr[-300:]}
            tokens = doc.get("output_token_throughput", 0) * doc.get("duration_s", 0)
            s = sorted(steps)
            rows.append({"workers": workers, "concurrency": c,
                         "client_processes": doc.get("client_processes"), "fake_step_ms": step_s * 1e3,
                         "engine_step_ms_p50": s[len(s) // 2] * 1e3 if s else None,
                         "itl_ms": doc.get("itl_ms"), "ttft_ms": doc.get("ttft_ms"),
                         "output_tok_s": doc.get("output_token_throughput"), "ideal_tok_s": c / step_s,
                         "frontend_cpu_us_per_token": cpu / tokens * 1e6 if tokens else None,
                         "error": doc.get("error")})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        stop.set()
        front.stop()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", default="8,32")
    ap.add_argument("--workers", default="1,2,4", help="--tokenizer-worker-num values to run")
    ap.add_argument("--step-us", type=float, default=1100)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--client-processes", type=int, default=0, help="bench serve's; 0: one per 8 streams")
    ap.add_argument("--out", default=None, help="write every row as one JSON document here")
    a = ap.parse_args()
    rows = []
    for w in [int(x) for x in a.workers.split(",")]:
        rows += run(w, [int(x) for x in a.concurrency.split(",")], a.step_us * 1e-6, a.output_len,
                    a.client_processes)
    if a.out:
        Path(a.out).write_text(json.dumps({"cpus": os.cpu_count(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
