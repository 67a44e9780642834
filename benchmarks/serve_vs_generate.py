"""Greedy ids served by `dcpctl launch` equal `dcpctl generate` on the same prompts (graphs change no token).

Runs `dcpctl generate --format json` on N prompts, then starts `dcpctl launch` with the same model and
flags, sends the same prompts as token ids (temperature 0) all at once, so the server batches them its
own way (prefill chunks, decode batches of changing size, padded graph replays, the pipelined decode),
and compares the ids.  Prints one JSON line; exit 1 when any differ.

usage: python3 -m benchmarks.serve_vs_generate [--device cuda] [--prompts 12] [--max-new 24]
       [-- extra dcpctl flags, e.g. --tp-size 1 --dcp-size 1]
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import re
import subprocess
import sys
import time
import urllib.request

READY = re.compile(r"^dcpctl: serving at (\S+) ")


def prompts(n: int) -> list[list[int]]:
    return [[256] + [32 + (7 * i + 11 * j) % 90 for j in range(3 + 29 * i % 97)] for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--max-new", type=int, default=24)
    ap.add_argument("extra", nargs="*", help="flags for both commands (after --)")
    a = ap.parse_args()
    ps = prompts(a.prompts)
    cli = [sys.executable, "-m", "dcpctl.cli.main"]
    gen = subprocess.run(cli
                         + ["generate", "--device", a.device, "--max-new-tokens", str(a.max_new), "--format",
                            "json", *[x for p in ps for x in ("--prompt-ids", ",".join(map(str, p)))],
                            *a.extra],
                         capture_output=True, text=True)
    if gen.returncode != 0:
        sys.exit(f"generate failed: {gen.stderr[-800:]}")
    want = [o["output_ids"] for o in json.loads(gen.stdout)["outputs"]]
    srv = subprocess.Popen(cli + ["launch", "--device", a.device, "--port", "0", *a.extra],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = None
        for line in srv.stdout:
            m = READY.match(line)
            if m:
                url = m.group(1)
                break
        if url is None:
            sys.exit(f"the server did not start: {srv.stderr.read()[-800:]}")

        def ask(p: list[int]) -> list[int]:
            body = json.dumps({"input_ids": p, "sampling_params": {"max_new_tokens": a.max_new,
                                                                   "temperature": 0}}).encode()
            req = urllib.request.Request(url + "/generate", body, {"Content-Type": "application/json"})
            return json.loads(urllib.request.urlopen(req, timeout=300).read())["output_ids"]
        t0 = time.time()
        with cf.ThreadPoolExecutor(len(ps)) as pool:
            got = list(pool.map(ask, ps))
        same = sum(g == w for g, w in zip(got, want))
        print(json.dumps({"prompts": len(ps), "equal": same, "seconds": round(time.time() - t0, 2),
                          "differ": [i for i, (g, w) in enumerate(zip(got, want)) if g != w]}))
        sys.exit(0 if same == len(ps) else 1)
    finally:
        srv.send_signal(2)
        try:
            srv.wait(30)
        except subprocess.TimeoutExpired:
            srv.kill()


if __name__ == "__main__":
    main()
