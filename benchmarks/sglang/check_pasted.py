#!/usr/bin/env python3
"""Published `sglang serve` lines, pasted into dcpctl and exported back: does SGLang resolve both the same?

For every line of tests/fixtures/sglang_serve_lines.yaml (SGLang's docs and cookbook) this script
  (a) plans it (`dcpctl plan --hardware HW --format json -- LINE`) and exports it
      (`dcpctl export sglang -- LINE`), taking the node script of the line's own --node-rank,
  (b) puts the shipped config of the model (presets/models, as config.json) in place of --model-path in both
      argvs,
  (c) runs SGLang 0.5.23's `prepare_server_args` + `resolve_once` (+ `check_server_args`) on the pasted argv
      and on the exported argv in the SGLang environment (benchmarks/sglang/setup_venv.sh), the platform
      emulated as in check_exports.py, and compares every field of `resolved_dict()`.
A field may differ only where the export writes the plan's own value of a setting the line left to SGLang
(EXPORT_WRITES); every other difference is a failure, and so is a rejection of one side only (both refused
with the same error, e.g. InfiniBand absent on the checking machine, is reported as same_rejection). A line
whose plan is invalid is reported with its violations and not exported.

    python -m benchmarks.sglang.check_pasted [--sglang-python /tmp/sglvenv/bin/python] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.sglang import check_exports as ce

REPO = ce.REPO
FIXTURE = REPO / "tests/fixtures/sglang_serve_lines.yaml"
SM = {"h200-8": 90, "b200-8": 100}
# settings the export writes from the plan when the line leaves them to SGLang: (flag, why)
EXPORT_WRITES = {"mem_fraction_static": "the plan's memory budget (--mem-fraction-static) is written out",
                 "host": "exports serve on 0.0.0.0 unless the line names --host"}
# model_path, tokenizer_path, served_model_name: both point at the same temp config dir; random_seed: SGLang
# draws a new one at every start when the line sets none
IGNORED = {"model_path", "tokenizer_path", "served_model_name", "random_seed"}


def launcher_free(line: str) -> list[str]:
    toks = shlex.split(line)
    i = next(i for i, t in enumerate(toks) if t in ("serve", "sglang.launch_server"))
    return toks[i + 1:]


def flag_value(argv: list[str], *flags: str) -> str | None:
    for i, t in enumerate(argv):
        if t in flags and i + 1 < len(argv):
            return argv[i + 1]
    return None


def set_model(argv: list[str], path: str) -> list[str]:
    out = list(argv)
    for i, t in enumerate(out):
        if t in ("--model-path", "--model", "--tokenizer-path") and i + 1 < len(out):
            out[i + 1] = path
    return out + ["--device", "cuda"]


def prepare(entry: dict, root: Path) -> dict:
    """dcpctl's side of one line: its plan, its export, and the two argvs SGLang is to resolve."""
    line, hw = entry["line"], entry["hardware"]
    argv = launcher_free(line)
    row: dict = {"source": entry["source"], "line": line, "hardware": hw}
    p = ce.dcpctl("plan", "--hardware", hw, "--format", "json", "--", *shlex.split(line))
    plan = json.loads(p.stdout[p.stdout.index("{"):]) if "{" in p.stdout else None
    if plan is None:
        return {**row, "status": "dcpctl_error", "error": (p.stdout + p.stderr)[-300:]}
    row["passed_through"] = plan["passed_through"]
    if not plan["valid"]:
        return {**row, "status": "plan_invalid", "violations": [v["message"] for v in plan["violations"]]}
    out = root / f"case{abs(hash(line + entry['source'])) % 10**8}"
    r = ce.dcpctl("export", "sglang", "--hardware", hw, "-o", str(out), "--", *shlex.split(line))
    if r.returncode:
        return {**row, "status": "export_error", "error": (r.stdout + r.stderr)[-300:]}
    rank = flag_value(argv, "--node-rank") or "0"
    role = plan["request"].get("disaggregation_mode") or "null"
    script = out / (f"node-{rank}.sh" if role == "null" else f"{role}-node-{rank}.sh")
    exported = shlex.split([x for x in script.read_text().splitlines() if x and not x.startswith("#")][-1])
    exported = exported[exported.index("serve") + 1:]
    mdir = str(ce.model_dir(plan["model"]["name"], root))
    return {**row, "status": "pending", "exported": exported, "sm": SM[hw],
            "argvs": [set_model(argv, mdir), set_model(exported, mdir)]}


def compare(row: dict, a: dict, b: dict) -> dict:
    row = {k: v for k, v in row.items() if k not in ("argvs", "sm")}
    row.update(pasted_accepted=a["accepted"], exported_accepted=b["accepted"])
    if not (a["accepted"] and b["accepted"]):
        # both refused for the same reason (e.g. no InfiniBand on the checking machine): same verdict, no
        # settings
        same = not a["accepted"] and not b["accepted"] and a.get("error") == b.get("error")
        return {**row, "status": "same_rejection" if same else "rejected", "pasted_error": a.get("error"),
                "exported_error": b.get("error")}
    diffs = {k: (a["resolved"].get(k), b["resolved"].get(k))
             for k in sorted(set(a["resolved"]) | set(b["resolved"]))
             if k not in IGNORED and a["resolved"].get(k) != b["resolved"].get(k)}
    allowed = {k: v for k, v in diffs.items() if k in EXPORT_WRITES}
    other = {k: v for k, v in diffs.items() if k not in EXPORT_WRITES}
    return {**row, "status": "same" if not other else "differs", "written_by_export": allowed, "diffs": other,
            "fields_compared": len(a["resolved"])}


def resolve_all(sgl_py: str, sm: int, argvs: list[list[str]]) -> list[dict]:
    """One SGLang process per platform resolves every argv (grid_worker.py, every resolved field)."""
    r = subprocess.run([sgl_py, str(Path(__file__).resolve().parent / "grid_worker.py"), str(sm), "0",
                        "full"],
                       input="".join(json.dumps(a) + "\n" for a in argvs), capture_output=True, text=True)
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    if len(lines) != len(argvs):
        raise SystemExit(f"SGLang worker SM{sm} died after {len(lines)}/{len(argvs)}: {r.stderr[-800:]}")
    return lines


def main() -> int:
    import yaml
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sglang-python", default=ce.DEFAULT_SGLANG_PY)
    ap.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1))
    ap.add_argument("--json", help="write every row here (benchmarks/data/sglang_pasted_lines.json)")
    a = ap.parse_args()
    entries = yaml.safe_load(FIXTURE.read_text())["lines"]
    root = Path(tempfile.mkdtemp(prefix="dcpctl-pasted-"))
    t0 = time.time()
    with ThreadPoolExecutor(a.jobs) as ex:
        rows = list(ex.map(lambda e: prepare(e, root), entries))
    for sm in sorted({r["sm"] for r in rows if r["status"] == "pending"}):
        todo = [i for i, r in enumerate(rows) if r["status"] == "pending" and r["sm"] == sm]
        res = resolve_all(a.sglang_python, sm, [x for i in todo for x in rows[i]["argvs"]])
        for j, i in enumerate(todo):
            rows[i] = compare(rows[i], res[2 * j], res[2 * j + 1])
    for r in rows:
        extra = r.get("diffs") or r.get("violations") or r.get("pasted_error") or r.get("error") or ""
        print(f"{r['status']:<12} {r['hardware']:<7} {r['line'][:110]}  {str(extra)[:200]}")
    counts = {s: sum(r["status"] == s for r in rows) for s in sorted({r["status"] for r in rows})}
    ver = subprocess.run([a.sglang_python, "-c", "import sglang; print(sglang.__version__)"],
                         capture_output=True, text=True).stdout.strip()
    print(f"\n{len(rows)} lines: {counts}; {time.time() - t0:.0f}s")
    if a.json:
        Path(a.json).write_text(json.dumps({"sglang": ver, "export_writes": EXPORT_WRITES, "counts": counts,
                                            "rows": rows}, indent=1, default=str) + "\n")
    return 0 if all(r["status"] in ("same", "same_rejection", "plan_invalid") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
