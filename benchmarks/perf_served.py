"""The served side of the performance model on one GPU, in one call: TTFT, served output throughput, and the
decode steps they are judged against (benchmarks/perf_accuracy.py --device TAG reads the files).

    python3 -m benchmarks.perf_served --out DIR [--budget-s 300] [--work DIR]

Parts, in this order (the rank part last: without its steps the host gap falls back to the rank files' served
loop), each skipped when it would start past --budget-s (the whole call fits 6 minutes of one GPU):

| part  | what                                                               | writes (TAG: h100, h200, ...) |
| ----- | ------------------------------------------------------------------ | ----------------------------- |
| ttft  | benchmarks/prefill_ttft.py on its dense checkpoint (V3 attention,  | prefill_ttft_TAG.json         |
|       | 4 dense layers): single prompts of 4K, 16K, 32K, 64K tokens, no HF |                               |
| serve | `dcpctl launch` on the MoE checkpoint below + `dcpctl bench serve` | perf_served_TAG.json          |
|       | at concurrency 1/8/32/64 (closed loop, PROMPT-token prompts,       |                               |
|       | OUTPUT out)                                                        |                               |
| rank  | `dcpctl bench rank --weights checkpoint` at TP 1 on the MoE        | rank_served_TAG.json          |
|       | checkpoint: the CUDA-graph decode step at batches 1/8/32/64 at the |                               |
|       | served mean context (PROMPT + OUTPUT / 2), and its served loop's   |                               |
|       | gap                                                                |                               |

The MoE checkpoint is `dcpctl bench rank`'s TP 1 check (benchmarks/gpu.sh rank_checkpoint: V3 attention, 4
layers, 1 dense + 3 MoE of 32 routed experts, top-8, bf16), written to --work (default gpu.sh's path, whose
name benchmarks/perf_sources.py knows). DIR also gets children.log (every part's output) and server.log: five
files. perf_served_TAG.json holds the command, the GPU, every part's exit status and seconds, the server's
seconds to ready and each concurrency's `bench serve` document.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PROMPT, OUTPUT = 1024, 512     # decode-heavy: OUTPUT steps against one round of prefills
CONCURRENCY = ((1, 8), (8, 24), (32, 96), (64, 192))      # (clients, requests): three rounds from 8 on
TTFT_LENGTHS = "4096,16384,32768,65536"
BATCHES = "1,8,32,64"
MAX_POSITIONS = 40960      # gpu.sh's rank checkpoint: the same config, so its bench rank cells apply


def device_tag(name: str) -> str:
    """The files' device part: the built-in hardware profile's GPU (NVIDIA H100 80GB HBM3 -> h100), else the
    name."""
    from benchmarks.perf_sources import device_profile
    profile = device_profile(name)
    return profile.split("-")[0] if profile else re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def files(out: Path, tag: str) -> dict[str, Path]:
    return {"ttft": out / f"prefill_ttft_{tag}.json", "rank": out / f"rank_served_{tag}.json",
            "serve": out / f"perf_served_{tag}.json", "log": out / "children.log",
            "server": out / "server.log"}


def ttft_argv(f: dict[str, Path]) -> list[str]:
    return [sys.executable, "-m", "benchmarks.prefill_ttft", str(f["ttft"]), "--lengths", TTFT_LENGTHS,
            "--hf-lengths", "", "--reps", "3"]


def rank_argv(f: dict[str, Path], ckpt: Path) -> list[str]:
    return [sys.executable, "-m", "dcpctl.cli.main", "bench", "rank", "--model-path", str(ckpt), "--weights",
            "checkpoint", "--tp-size", "1", "--max-running-requests", str(CONCURRENCY[-1][0]), "--device",
            "cuda", "--batches", BATCHES, "--contexts", str(PROMPT + OUTPUT // 2), "--out", str(f["rank"])]


def launch_argv(ckpt: Path) -> list[str]:
    # decode graphs up to --max-running-requests: launch's default (launch/cuda_graphs.py)
    most = CONCURRENCY[-1][0]
    return [sys.executable, "-m", "dcpctl.cli.main", "launch", "--model-path", str(ckpt), "--device", "cuda",
            "--tp-size", "1", "--dcp-size", "1", "--port", "0", "--page-size", "64", "--max-running-requests",
            str(most), "--max-total-tokens", str(most * (PROMPT + OUTPUT + 128)), "--dtype", "bfloat16"]


def serve_argv(url: str, c: int, n: int) -> list[str]:
    return [sys.executable, "-m", "dcpctl.cli.main", "bench", "serve", "--url", url, "--concurrency", str(c),
            "--requests", str(n), "--input-len", str(PROMPT), "--output-len", str(OUTPUT), "--seed", str(c),
            "--format", "json"]


class Parts:
    """Every part's exit status and seconds, one log for the children's output, the budget."""

    def __init__(self, log: Path, budget_s: float) -> None:
        self.log, self.t0, self.budget_s, self.done = log, time.monotonic(), budget_s, []

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.t0)

    def run(self, name: str, argv: list[str], timeout: float, need: float = 10.0) -> tuple[int | None, str]:
        """argv's exit status (None: skipped or timed out) and stdout; skipped with less than `need` seconds
        left."""
        if self.left() < need:
            self.done.append({"part": name, "rc": None, "note": "skipped: budget spent"})
            return None, ""
        t0 = time.monotonic()
        with open(self.log, "a") as log:
            log.write(f"\n== {name}: {' '.join(argv)}\n")
            log.flush()
            try:
                p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=log, text=True,
                                   timeout=min(timeout, max(10.0, self.left())))
                rc, out = p.returncode, p.stdout
            except subprocess.TimeoutExpired:
                rc, out = None, ""
                log.write(f"[perf_served] {name} timed out\n")
        self.done.append({"part": name, "rc": rc, "seconds": round(time.monotonic() - t0, 1)})
        print(f"[perf_served {time.monotonic() - self.t0:5.0f}s] {name}: rc={rc}", file=sys.stderr,
              flush=True)
        return rc, out


def moe_checkpoint(d: Path) -> Path:
    from benchmarks.serve_peers import MOE, write_bf16
    from dcpctl.bench.decode import SHAPES
    if (d / "model.safetensors").exists():
        return d
    return write_bf16(d,
                      dict(SHAPES["v3"], num_hidden_layers=4, max_position_embeddings=MAX_POSITIONS, **MOE),
                      "cuda")


def serve(parts: Parts, f: dict[str, Path], ckpt: Path) -> dict[str, Any]:
    from benchmarks.serve_procs import Server
    if parts.left() < 60:
        parts.done.append({"part": "serve", "rc": None, "note": "skipped: budget spent"})
        return {}
    srv = Server(launch_argv(ckpt), f["server"], min(240.0, parts.left()))
    res: dict[str, Any] = {"ready_s": srv.ready_s, "cells": {}}
    for c, n in CONCURRENCY if srv.url else ():
        _, out = parts.run(f"serve c={c}", serve_argv(srv.url, c, n), 120)
        try:
            res["cells"][str(c)] = json.loads(out) if out.strip() else None
        except ValueError:
            res["cells"][str(c)] = None
    parts.done.append({"part": "server", "rc": srv.stop(), "ready_s": srv.ready_s})
    return res


def main(argv: list[str] | None = None) -> int:
    import torch
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget-s", type=float, default=300.0)
    ap.add_argument("--work", type=Path, default=Path("/tmp/dcpctl-rank-moe"),
                    help="the MoE checkpoint's folder")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    name = torch.cuda.get_device_name()
    f = files(a.out, device_tag(name))
    parts = Parts(f["log"], a.budget_s)
    ckpt = moe_checkpoint(a.work)
    torch.cuda.empty_cache()      # the children have the GPU to themselves
    parts.run("ttft", ttft_argv(f), 120)
    doc = {"command": " ".join(["python3", "-m", "benchmarks.perf_served", *(argv or sys.argv[1:])]),
           "commit": _commit(), "device": name, "checkpoint": "rank-moe-4", "prompt": PROMPT,
           "output": OUTPUT, "steps": f["rank"].name, "serve": serve(parts, f, ckpt), "parts": parts.done}
    f["serve"].write_text(json.dumps(doc, indent=1) + "\n")
    parts.run("rank", rank_argv(f, ckpt), 120, need=45)   # last: without it the host gap is the rank files'
                                                          # served loop
    f["serve"].write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(parts.done, indent=1))
    # a stopped server's own status aside
    ran = all(p.get("rc") == 0 for p in parts.done if p["part"] != "server")
    return 0 if ran and doc["serve"].get("ready_s") is not None else 1


def _commit() -> str:
    from dcpctl import tuning
    return tuning.source_commit()


if __name__ == "__main__":
    sys.exit(main())
