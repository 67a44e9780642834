"""What rank 0's HTTP thread costs a decode step, without a GPU: the real app and bridge, a fake engine loop.

The fake loop runs like server/loop.run_loop: take the control message, then per step hold the GIL for
--host-us of Python work (the engine's host share of a step) and sleep --gpu-us (the GPU share, when the
engine thread waits in a CUDA sync with the GIL released), then deliver one token per running request.
`dcpctl bench serve` (a separate process) streams against it: the ITL it sees minus (host + gpu) is what the
HTTP side adds.  Prints one JSON line per concurrency.

usage: PYTHONPATH=. python3 benchmarks/http_overhead.py [--concurrency 1,8,32] [--host-us 150] [--gpu-us 950]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time


def fake_loop(bridge, stop: threading.Event, host_s: float, gpu_s: float, steps: list) -> None:
    from dcpctl.runtime.engine.events import Event
    running: dict[int, list] = {}     # rid -> [tokens left]
    while not stop.is_set():
        msg = bridge.take(wait=not running)
        for r in msg.new:
            running[r.rid] = [r.params.max_new_tokens]
        for rid in msg.cancel:
            running.pop(rid, None)
        if not running:
            continue
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < host_s:   # Python work holding the GIL
            pass
        time.sleep(gpu_s)                          # the GPU's share: the GIL is free
        events = []
        for rid, left in list(running.items()):
            left[0] -= 1
            done = left[0] == 0
            events.append(Event(rid, 65 + rid % 26, -0.5, "length" if done else None))
            if done:
                del running[rid]
        bridge.deliver(events)
        steps.append(time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--host-us", type=float, default=150)
    ap.add_argument("--gpu-us", type=float, default=950)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--switch-s", type=float, default=None, help="sys.setswitchinterval (default: Python's 5 ms)")
    a = ap.parse_args()
    from dcpctl.runtime.server.app import build_app
    from dcpctl.runtime.server.bridge import Bridge
    from dcpctl.runtime.server.gen import ServerState
    from dcpctl.runtime.server.http import HttpServer
    from dcpctl.runtime.server.metrics import Metrics
    from dcpctl.runtime.tokenizer import ByteTokenizer
    if a.switch_s is not None:
        sys.setswitchinterval(a.switch_s)
    bridge = Bridge(4096)
    state = ServerState(bridge, ByteTokenizer(), "fake", 264, 1 << 20, 1 << 24, Metrics(1), created=int(time.time()))
    http = HttpServer(build_app(state), "127.0.0.1", 0).start()
    stop, steps = threading.Event(), []
    threading.Thread(target=fake_loop, args=(bridge, stop, a.host_us * 1e-6, a.gpu_us * 1e-6, steps),
                     daemon=True).start()
    for c in [int(x) for x in a.concurrency.split(",")]:
        steps.clear()
        out = subprocess.run([sys.executable, "-m", "dcpctl.cli.main", "bench", "serve", "--url", http.url,
                              "--concurrency", str(c), "--requests", str(max(3 * c, 8)), "--input-len", "16",
                              "--output-len", str(a.output_len), "--format", "json"],
                             capture_output=True, text=True)
        doc = json.loads(out.stdout) if out.returncode == 0 else {"error": out.stderr[-300:]}
        ideal = (a.host_us + a.gpu_us) / 1e3
        steps_ms = sorted(steps)[len(steps) // 2] * 1e3 if steps else None
        print(json.dumps({"concurrency": c, "ideal_step_ms": ideal, "engine_step_ms_p50": steps_ms,
                          "itl_ms_p50": doc.get("itl_ms", {}).get("p50"), "error": doc.get("error")}))
    stop.set()
    http.stop()


if __name__ == "__main__":
    main()
