#!/usr/bin/env python3
"""Does `dcpctl plan` say what SGLang 0.5.23 would do? A grid of >= 1,000 cases, each run both ways.

Per case (benchmarks/sglang/grid_cases.py): `dcpctl plan ... --format json` in-process (click's runner,
so a crash is seen as SGLang's user would see it), and SGLang's own `prepare_server_args` +
`resolve_once` + `check_server_args` on an emulated SM90/SM100/SM103 platform, MNNVL faked for
GB200/GB300 (benchmarks/sglang/grid_worker.py, one SGLang process per platform, results cached by
argv since they do not depend on dcpctl). Every case lands in one class:

  agree_accept / agree_reject      both accept with the same resolved values / both reject
  crash                            dcpctl exits with neither 0 nor 2
  sglang_rejects_dcpctl_accepts    dcpctl says valid, SGLang refuses to start
  dcpctl_rejects_unexplained       dcpctl rejects, SGLang accepts, and some violation is not one of
                                   the checks SGLang cannot see (EXTRA_CHECKS below)
  dcpctl_rejects_explained         dcpctl rejects for a reason SGLang cannot see (memory, containment...)
  differs                          both accept, some resolved value differs (COMPARED)

Usage (repo root, dcpctl venv):
    python -m benchmarks.sglang.grid --sglang-python /work/sglvenv/bin/python [--json out.json]
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
from benchmarks.sglang import grid_cases
from dcpctl.plan import sglang as sglang_rules
from dcpctl.plan.sglang import SGLANG_VERSION

HERE = Path(__file__).resolve().parent
COMPARED = ("dcp_comm_backend", "dcp_replicate_q_proj", "decode_attention_backend", "page_size",
            "kv_cache_dtype")
SPEC_K = "speculative_num_draft_tokens"  # compared too where dcpctl resolves it
FAILURES = ("crash", "sglang_rejects_dcpctl_accepts", "dcpctl_rejects_unexplained", "differs")
# dcpctl's own rejections of what SGLang's argument resolution cannot see, each with its reason
EXTRA_CHECKS = sglang_rules.EXTRA_CHECKS
FI_STUB = {"flashinfer/__init__.py": '"""Import-only FlashInfer stub (grid.py): resolution-time signature '
                                     'only."""\n',
           "flashinfer/decode.py": "def trtllm_batch_decode_with_kv_cache_mla(query=None, kv_cache=None, "
                                   "enable_dcp=False, **kwargs):\n    raise RuntimeError('flashinfer "
                                   "stub')\n"}


def run_dcpctl(flags: list[str]) -> dict[str, Any]:
    from click.testing import CliRunner
    from dcpctl.cli.main import cli
    r = CliRunner().invoke(cli, ["plan", *flags, "--format", "json"])
    out: dict[str, Any] = {"exit": r.exit_code}
    if r.exit_code not in (0, 2) or (r.exception and not isinstance(r.exception, SystemExit)):
        out["crash"] = f"{type(r.exception).__name__}: {r.exception}" if r.exception else r.output[-300:]
        return out
    if r.stdout.strip().startswith("{"):
        doc = json.loads(r.stdout)
        dec = doc["decisions"]
        out.update(valid=doc["valid"], violations=doc["violations"], sglang_version=doc.get("sglang_version"),
                   resolved={k: dec[k]["value"] for k in (*COMPARED, SPEC_K) if k in dec})
    else:
        out.update(valid=False, user_error=r.stderr.strip()[-400:])
    return out


def _key(sm: int, mnnvl: bool, argv: list[str]) -> str:
    return hashlib.sha1(json.dumps([sm, mnnvl, argv]).encode()).hexdigest()


def run_sglang(jobs: list[tuple[int, bool, bool, list[str]]], sgl_py: str, cache: dict[str, Any]) -> None:
    """Resolve every (sm, mnnvl, needs_stub, argv) not yet in the cache, one worker per platform."""
    todo = collections.defaultdict(list)
    for sm, mnnvl, stub, argv in jobs:
        if _key(sm, mnnvl, argv) not in cache:
            todo[(sm, mnnvl, stub)].append(argv)
    stub_dir = Path(tempfile.mkdtemp(prefix="grid-fistub-"))
    for rel, text in FI_STUB.items():
        (stub_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (stub_dir / rel).write_text(text)
    for (sm, mnnvl, stub), argvs in sorted(todo.items()):
        uniq = list({json.dumps(a): a for a in argvs}.values())
        env = dict(os.environ)
        if stub:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(stub_dir), env.get("PYTHONPATH")]))
        t0 = time.time()
        r = subprocess.run([sgl_py, str(HERE / "grid_worker.py"), str(sm), "1" if mnnvl else "0"], env=env,
                           input="".join(json.dumps(a) + "\n" for a in uniq), capture_output=True, text=True)
        lines = [x for x in r.stdout.splitlines() if x.startswith("{")]
        if len(lines) != len(uniq):
            raise SystemExit(f"SGLang worker SM{sm} died after {len(lines)}/{len(uniq)}: {r.stderr[-800:]}")
        for a, line in zip(uniq, lines):
            cache[_key(sm, mnnvl, a)] = json.loads(line)
        print(f"  SGLang SM{sm} mnnvl={int(mnnvl)} stub={int(stub)}: {len(uniq)} argv in "
              f"{time.time() - t0:.0f}s",
              file=sys.stderr)


def sglang_verdict(res: dict[str, Any], model_dtype: str) -> dict[str, Any]:
    """SGLang's answer in dcpctl's vocabulary (unset replicate-q is off; auto KV is the model dtype)."""
    if not res["accepted"]:
        return {"accepted": False, "error": res["error"], "at": res.get("at")}
    r = res["resolved"]
    kv = r.get("kv_cache_dtype")
    return {"accepted": True, "values": {
        "dcp_comm_backend": r.get("dcp_comm_backend"),
        "dcp_replicate_q_proj": bool(r.get("dcp_replicate_q_proj")),
        "decode_attention_backend": r.get("decode_attention_backend") or r.get("attention_backend"),
        "page_size": r.get("page_size"),
        "kv_cache_dtype": {"auto": model_dtype, "bf16": "bfloat16"}.get(kv, kv),
        SPEC_K: r.get(SPEC_K)}}


def classify(d: dict[str, Any], s: dict[str, Any]) -> tuple[str, Any]:
    """One class per case (module docstring); `d` from run_dcpctl, `s` from sglang_verdict."""
    return engine_verdicts.classify(d, s, "sglang", EXTRA_CHECKS, lambda mine, got: {
        k: (v, got[k]) for k, v in mine.items() if v != got[k] and (k != SPEC_K or v is not None)})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sglang-python", default=os.environ.get("SGLANG_PYTHON", "/work/sglvenv/bin/python"))
    ap.add_argument("--cache", default="/tmp/dcpctl-sglang-grid-cache.json", help="SGLang results by argv")
    ap.add_argument("--fresh", action="store_true", help="ignore the cache (resolve every argv again)")
    ap.add_argument("--json", help="write every case (flags, argv, both results, class) here")
    ap.add_argument("--record",
                    help="write SGLang's verdict per case here, gzipped JSON (the CI replay file)")
    ap.add_argument("--group", help="only this case group (" + ", ".join(grid_cases.GROUPS) + ")")
    ap.add_argument("--show", type=int, default=3, help="examples printed per failure class and reason")
    a = ap.parse_args()
    models = grid_cases.write_models(Path(tempfile.gettempdir()) / "dcpctl-sglang-grid-models")
    dtypes = {n: c.get("torch_dtype", "bfloat16") for n, c in grid_cases.model_configs().items()}
    cases = [c for c in grid_cases.cases() if not a.group or c["group"] == a.group]
    cache_path = Path(a.cache)
    cache = json.loads(cache_path.read_text()) if cache_path.exists() and not a.fresh else {}
    # venv fixed since
    cache = {k: v for k, v in cache.items() if "ModuleNotFoundError" not in v.get("error", "")}
    t0 = time.time()
    jobs = []
    for c in cases:
        sm, mnnvl, argv = grid_cases.sglang_argv(c["opts"], models)
        c.update(sm=sm, mnnvl=mnnvl, argv=argv, flags=grid_cases.dcpctl_flags(c["opts"], models))
        jobs.append((sm, mnnvl, grid_cases.merged(c["opts"])["model"] == "kimi-k3", argv))
    run_sglang(jobs, a.sglang_python, cache)
    cache_path.write_text(json.dumps(cache))
    t1 = time.time()
    counts: collections.Counter = collections.Counter()
    for c in cases:
        c["dcpctl"] = run_dcpctl(c["flags"])
        c["sglang"] = sglang_verdict(cache[_key(c["sm"], c["mnnvl"], c["argv"])],
                                     dtypes[grid_cases.merged(c["opts"])["model"]])
        c["class"], c["detail"] = classify(c["dcpctl"], c["sglang"])
        counts[c["class"]] += 1
    report(cases, counts, a.show, t1 - t0, time.time() - t1)
    if a.json:
        Path(a.json).write_text(json.dumps(cases, indent=1, default=str))
    if a.record:  # SGLang's verdicts alone, replayed against dcpctl in CI (tests/plan/test_sglang_grid.py)
        rows = [{"opts": c["opts"], "sglang": c["sglang"]} for c in cases]
        doc = json.dumps({"sglang": SGLANG_VERSION, "cases": rows}, separators=(",", ":"), sort_keys=True)
        Path(a.record).write_bytes(gzip.compress(doc.encode(), mtime=0))
    return 1 if any(counts[f] for f in FAILURES) else 0


def report(cases: list[dict[str, Any]], counts: collections.Counter, show: int, t_sgl: float,
           t_dcp: float) -> None:
    versions = {c["dcpctl"].get("sglang_version") for c in cases if "crash" not in c["dcpctl"]}
    print(f"{len(cases)} cases; SGLang modelled by dcpctl: {sorted(map(str, versions))}; "
          f"SGLang {t_sgl:.0f}s, dcpctl {t_dcp:.0f}s")
    engine_verdicts.print_classes(cases, counts, FAILURES, show)
    other = [c for c in cases if c["class"] == "agree_reject" and "user_error" not in c["dcpctl"]
             and {v["code"] for v in c["dcpctl"]["violations"]} <= set(EXTRA_CHECKS)]
    print(f"  (of agree_reject, {len(other)} where dcpctl names only checks SGLang cannot see, not SGLang's "
          "own)")


if __name__ == "__main__":
    sys.exit(main())
