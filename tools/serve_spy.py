"""Where a served decode step's host time goes under load: py-spy on rank 0 and on one HTTP worker while
`dcpctl bench serve` runs, then the top frames of each.

Starts `dcpctl launch` with the given flags (after --), waits for its ready line, runs one warm-up bench, then
for each of rank 0 and the first HTTP worker starts a bench of --concurrency streams and records py-spy for
--seconds while it runs. Stops the server (SIGINT to its process group) whatever happens. Writes
OUT/serve_spy.json: the benches' ITL, and per process the frames with the most samples (own time and
inclusive). Needs py-spy on PATH or --py-spy (a manylinux wheel carries the binary) and the right to ptrace
the server's processes.

usage: python3 -m tools.serve_spy --out DIR [--concurrency 32] [--requests 64] [--input-len 1000]
       [--output-len 64] [--seconds 1] [--py-spy PATH]
       -- <dcpctl launch flags, e.g. --model-path DIR --device cuda>
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

from benchmarks import serve_launch


def children(pid: int) -> list[int]:
    """Every descendant of pid (from /proc)."""
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def top_frames(raw: Path, n: int = 30) -> dict:
    own, incl, total = Counter(), Counter(), 0
    for line in raw.read_text().splitlines() if raw.exists() else []:
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        frames, c = stack.split(";"), int(count)
        total += c
        own[frames[-1]] += c
        for f in set(frames):
            incl[f] += c
    return {"samples": total, "own": own.most_common(n), "inclusive": incl.most_common(n)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--input-len", type=int, default=1000)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--py-spy", default=shutil.which("py-spy") or "py-spy")
    ap.add_argument("--native", action="store_true",
                    help="py-spy --native: C/C++ frames too (CUDA, torch); it pauses the process per sample")
    ap.add_argument("--only-rank0", action="store_true", help="profile rank 0 only")
    ap.add_argument("launch", nargs=argparse.REMAINDER, help="-- then the dcpctl launch flags")
    a = ap.parse_args()
    flags = a.launch[1:] if a.launch[:1] == ["--"] else a.launch
    a.out.mkdir(parents=True, exist_ok=True)
    dcpctl = serve_launch.DCPCTL
    doc: dict = {"launch": flags}
    srv, url = serve_launch.start(flags, a.out / "launch.log")
    try:
        bench = dcpctl + ["bench", "serve", "--url", url, "--concurrency", str(a.concurrency), "--requests",
                          str(a.requests), "--input-len", str(a.input_len), "--output-len", str(a.output_len),
                          "--format", "json"]
        subprocess.run(bench, capture_output=True, timeout=600)          # warm-up
        below = children(srv.pid)
        rank0 = next((p for p in below if "dcpctl.runtime.worker" in cmdline(p)
                      and "torch.distributed.run" not in cmdline(p)), None)
        worker = next((p for p in below if "child_main" in cmdline(p)), None)
        for name, pid in (("rank0", rank0), ("http_worker", worker))[:1 if a.only_rank0 else 2]:
            if pid is None:
                doc[name] = {"error": "process not found"}
                continue
            load = subprocess.Popen(bench, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            time.sleep(0.3)                                                 # past the first prefills
            raw = a.out / f"{name}.txt"
            mode = ["--native"] if a.native else ["--nonblocking"]       # py-spy refuses the two together
            spy = subprocess.run([a.py_spy, "record", "-p", str(pid), "-d", str(max(1, round(a.seconds))),
                                  "-r", "1000", "-f", "raw", "-o", str(raw), "--threads", *mode],
                                 capture_output=True, text=True, timeout=60)
            out, _ = load.communicate(timeout=600)
            doc[name] = {"pid": pid, "py_spy_rc": spy.returncode, "py_spy_err": spy.stderr[-300:],
                         "itl_ms": json.loads(out).get("itl_ms") if out.strip() else None, **top_frames(raw)}
    finally:
        serve_launch.stop(srv)
        (a.out / "serve_spy.json").write_text(json.dumps(doc, indent=1))
    for name in ("rank0", "http_worker"):
        d = doc.get(name, {})
        print(f"== {name}: {d.get('samples', 0)} samples, ITL {d.get('itl_ms')}")
        for frame, c in d.get("own", [])[:15]:
            print(f"  own {c:6d}  {frame[:140]}")
        for frame, c in d.get("inclusive", [])[:25]:
            print(f"  inc {c:6d}  {frame[:140]}")


if __name__ == "__main__":
    main()
