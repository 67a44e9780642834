#!/usr/bin/env python3
"""Does `dcpctl plan --engine vllm` say what vLLM 0.34.0 would do? A grid of >= 1,000 cases, each run both
ways.

Per case (benchmarks/vllm/vllm_grid_cases.py): `dcpctl plan --engine vllm ... --format json` in-process
(click's runner, so a crash is seen as a user would see it), and vLLM's own config construction, attention
selection and block-size check on an emulated GPU (benchmarks/vllm/vllm_grid_worker.py, one vLLM process per
hardware profile; results cached by argv). Every case lands in one class:

  agree_accept / agree_reject      both accept with the same resolved values / both reject
  crash                            dcpctl exits with neither 0 nor 2
  vllm_rejects_dcpctl_accepts      dcpctl says valid, vLLM refuses to start
  dcpctl_rejects_unexplained       dcpctl rejects, vLLM accepts, and some violation is not one of the checks
                                   vLLM's config construction cannot see (dcpctl.plan.vllm.EXTRA_CHECKS)
  dcpctl_rejects_explained         dcpctl rejects for a reason vLLM cannot see (memory, node fit...)
  differs                          both accept, some resolved value differs (COMPARED)

Usage (repo root, dcpctl venv; the vLLM venv from benchmarks/vllm/setup_venv.sh):
    python -m benchmarks.vllm.vllm_grid --vllm-python /tmp/vllmvenv/bin/python [--record benchmarks/data/vllm_grid.json.gz]
Exit status 0 when the four failure classes are all empty.
"""
from __future__ import annotations

import argparse
import collections
import gzip
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import engine_verdicts
from benchmarks.vllm import vllm_grid_cases
from dcpctl.plan.vllm import EXTRA_CHECKS, VLLM_VERSION

HERE = Path(__file__).resolve().parent
COMPARED = ("tp", "dp", "dcp", "ep", "dcp_comm_backend", "dcp_replicate_q_proj", "decode_attention_backend",
            "page_size", "kv_cache_dtype", "cp_kv_cache_interleave_size", "gpu_memory_utilization")
FAILURES = ("crash", "vllm_rejects_dcpctl_accepts", "dcpctl_rejects_unexplained", "differs")


def run_dcpctl(flags: list[str]) -> dict[str, Any]:
    from click.testing import CliRunner
    from dcpctl.cli.main import cli
    r = CliRunner().invoke(cli, ["plan", *flags, "--format", "json"])
    out: dict[str, Any] = {"exit": r.exit_code}
    if r.exit_code not in (0, 2) or (r.exception and not isinstance(r.exception, SystemExit)):
        out["crash"] = f"{type(r.exception).__name__}: {r.exception}" if r.exception else r.output[-300:]
        return out
    if not r.stdout.strip().startswith("{"):
        out.update(valid=False, user_error=r.stderr.strip()[-400:])
        return out
    doc = json.loads(r.stdout)
    t, dec = doc["topology"], doc["decisions"]
    dpa = t["enable_dp_attention"]
    resolved = {"tp": t["attn_tp_size"], "dp": t["dp_size"], "dcp": t["dcp_size"], "ep": t["ep_size"] > 1,
                **{k: dec[k]["value"] for k in COMPARED if k in dec}}
    resolved["dp"] = t["attn_dp_size"] if dpa else t["dp_size"]
    out.update(valid=doc["valid"], violations=doc["violations"], engine=doc.get("engine"), resolved=resolved)
    return out


def export_argv(opts: dict[str, Any], models: dict[str, Path]) -> list[str]:
    """The node-0 `vllm serve` line `dcpctl export vllm` writes for a case, as vLLM argv (`--model` first); an
    export dcpctl refuses gives the case's own line (the case then compares the two refusals). Keys in sorted
    order, so that the recorded case (sorted JSON) replays the same line."""
    import shlex
    from click.testing import CliRunner
    from dcpctl.cli.main import cli
    opts = dict(sorted(opts.items()))
    r = CliRunner().invoke(cli, ["export", "vllm", *vllm_grid_cases.dcpctl_flags(opts, models)])
    lines = [x for x in r.stdout.splitlines() if x.startswith("vllm serve ")]
    if r.exit_code != 0 or not lines:
        return vllm_grid_cases.vllm_argv(opts, models)
    argv = shlex.split(lines[0])
    return ["--model", argv[2], *argv[3:]]


def _key(hw: str, argv: list[str]) -> str:
    return hashlib.sha1(json.dumps([hw, argv]).encode()).hexdigest()


def run_vllm(jobs: list[tuple[str, list[str]]], vllm_py: str, cache: dict[str, Any]) -> None:
    """Resolve every (hardware, argv) not yet in the cache, one worker process per hardware profile."""
    todo = collections.defaultdict(list)
    for hw, argv in jobs:
        if _key(hw, argv) not in cache:
            todo[hw].append(argv)
    for hw, argvs in sorted(todo.items()):
        uniq = list({json.dumps(a): a for a in argvs}.values())
        t0 = time.time()
        r = subprocess.run([vllm_py, str(HERE / "vllm_grid_worker.py"), hw], input="".join(json.dumps(a) + "\n" for a in uniq),
                           capture_output=True, text=True, env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR", "HF_HUB_OFFLINE": "1"})
        lines = [x for x in r.stdout.splitlines() if x.startswith("{")]
        if len(lines) != len(uniq):
            raise SystemExit(f"vLLM worker {hw} died after {len(lines)}/{len(uniq)}: {r.stderr[-800:]}")
        for a, line in zip(uniq, lines):
            cache[_key(hw, a)] = json.loads(line)
        print(f"  vLLM {hw}: {len(uniq)} argv in {time.time() - t0:.0f}s", file=sys.stderr)


def vllm_verdict(res: dict[str, Any]) -> dict[str, Any]:
    """vLLM's answer in dcpctl's vocabulary (kv auto is the model's dtype; unset memory use is its
    default)."""
    if not res["accepted"]:
        return {"accepted": False, "error": res["error"], "at": res.get("at")}
    r = res["resolved"]
    kv = r["model_dtype"] if r["kv_cache_dtype"] == "auto" else r["kv_cache_dtype"]
    return {"accepted": True, "values": {
        "tp": r["tp"], "dp": r["dp"], "dcp": r["dcp"], "ep": bool(r["ep"]), "dcp_comm_backend": r["dcp_comm_backend"],
        "dcp_replicate_q_proj": bool(r["dcp_q_replicate"]), "decode_attention_backend": r["attention_backend"],
        "page_size": r["block_size"], "kv_cache_dtype": kv, "cp_kv_cache_interleave_size": r["cp_kv_cache_interleave_size"],
        "gpu_memory_utilization": r["gpu_memory_utilization"]}}  # CacheConfig.resolved_gpu_memory_utilization


def classify(d: dict[str, Any], v: dict[str, Any]) -> tuple[str, Any]:
    """One class per case (module docstring); `d` from run_dcpctl, `v` from vllm_verdict."""
    return engine_verdicts.classify(d, v, "vllm", EXTRA_CHECKS, lambda mine, got: {
        k: (mine.get(k), got[k]) for k in COMPARED if mine.get(k) != got[k]})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vllm-python", default=os.environ.get("VLLM_PYTHON", "/tmp/vllmvenv/bin/python"))
    ap.add_argument("--cache", default="/tmp/dcpctl-vllm-grid-cache.json", help="vLLM results by argv")
    ap.add_argument("--fresh", action="store_true", help="ignore the cache (resolve every argv again)")
    ap.add_argument("--json", help="write every case (flags, argv, both results, class) here")
    ap.add_argument("--record", help="write vLLM's verdict per case here, gzipped JSON (the CI replay file)")
    ap.add_argument("--group", help="only this case group (" + ", ".join(vllm_grid_cases.GROUPS) + ")")
    ap.add_argument("--show", type=int, default=3, help="examples printed per failure class and reason")
    a = ap.parse_args()
    models = vllm_grid_cases.write_models(Path(tempfile.gettempdir()) / "dcpctl-vllm-grid-models")
    cases = [c for c in vllm_grid_cases.cases() if not a.group or c["group"] == a.group]
    cache_path = Path(a.cache)
    cache = json.loads(cache_path.read_text()) if cache_path.exists() and not a.fresh else {}
    t0 = time.time()
    for c in cases:
        c["flags"] = vllm_grid_cases.dcpctl_flags(c["opts"], models)
        c["argv"] = export_argv(c["opts"], models) if c["opts"].get("export") else \
            vllm_grid_cases.vllm_argv(c["opts"], models)
    run_vllm([(c["opts"]["hardware"], c["argv"]) for c in cases], a.vllm_python, cache)
    cache_path.write_text(json.dumps(cache))
    t1 = time.time()
    counts: collections.Counter = collections.Counter()
    for c in cases:
        c["dcpctl"] = run_dcpctl(c["flags"])
        c["vllm"] = vllm_verdict(cache[_key(c["opts"]["hardware"], c["argv"])])
        c["class"], c["detail"] = classify(c["dcpctl"], c["vllm"])
        counts[c["class"]] += 1
    report(cases, counts, a.show, t1 - t0, time.time() - t1)
    if a.json:
        Path(a.json).write_text(json.dumps(cases, indent=1, default=str))
    if a.record:  # vLLM's verdicts alone, replayed against dcpctl in CI (tests/plan/test_vllm_grid.py)
        rows = [{"opts": c["opts"], "vllm": c["vllm"], **({"argv": _portable(c["argv"])} if c["opts"].get("export")
                                                          else {})} for c in cases]
        doc = json.dumps({"vllm": VLLM_VERSION, "cases": rows}, separators=(",", ":"), sort_keys=True)
        Path(a.record).write_bytes(gzip.compress(doc.encode(), mtime=0))
    return 1 if any(counts[f] for f in FAILURES) else 0


def _portable(argv: list[str]) -> list[str]:
    """An export case's vLLM argv with the model directory as its preset name (the replay writes its own)."""
    return ["--model", Path(argv[1]).name, *argv[2:]]


def report(cases: list[dict[str, Any]], counts: collections.Counter, show: int, t_vllm: float,
           t_dcp: float) -> None:
    print(f"{len(cases)} cases; vLLM {VLLM_VERSION}; vLLM {t_vllm:.0f}s, dcpctl {t_dcp:.0f}s")
    engine_verdicts.print_classes(cases, counts, FAILURES, show)
    explained = collections.Counter(code for c in cases if c["class"] == "dcpctl_rejects_explained"
                                    for code in c["detail"])
    for code, n in explained.most_common():
        print(f"  dcpctl only: {code:<28} x{n}  ({EXTRA_CHECKS[code]})")


if __name__ == "__main__":
    sys.exit(main())
