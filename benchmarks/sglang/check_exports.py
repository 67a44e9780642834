#!/usr/bin/env python3
"""Check that the `sglang serve` commands dcpctl exports are accepted by SGLang's own argument resolution.

For every case of a matrix of dcpctl plans this script
  (a) runs dcpctl's planner (`dcpctl plan --format json`) and exporter (`dcpctl export sglang -o DIR`) in the
      dcpctl environment and takes node 0's `sglang serve` argv (the decode side's node 0 for a PD decode
      plan),
  (b) writes the model preset's `config` mapping (presets/models/NAME.yaml) as config.json into a temp dir
      and puts that dir in place of --model-path,
  (c) runs SGLang's `prepare_server_args(argv)` + `resolve_once()` in the SGLang environment
      (benchmarks/sglang/setup_venv.sh) with the platform emulated to match the plan's hardware
      (SM90 for h100/h200, SM100 for b200/gb200) through `sglang.srt.runtime_context.override_platform`,
  (d) compares SGLang's resolved values with dcpctl's plan decisions and prints one row per case.

No GPU is needed: resolution is config-time only. Limits of the emulation: MNNVL (GB200 NVL72's multi-node
NVLink) cannot be emulated - SGLang's argument resolution does not read it, so the NCCL_MNNVL_* environment
dcpctl exports for MNNVL fabrics is recorded but not exercised; `--device cuda` is added because SGLang's
device auto-detection asks torch for an accelerator before any platform override is consulted; Kimi K3 DCP
needs FlashInfer's `trtllm_batch_decode_with_kv_cache_mla(..., enable_dcp=...)` to exist, so an import-only
flashinfer stub with that signature is put on PYTHONPATH for Kimi K3 cases (it raises if called).

Usage (from the repo root, in the dcpctl venv):
    python -m benchmarks.sglang.check_exports [--sglang-python /tmp/sglvenv-clean/bin/python] [--jobs 8]
Exit status 0 when SGLang accepts every exported command (field differences are reported, not fatal),
1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_LOCK = threading.Lock()  # the per-model config dirs and the stub are shared by the worker threads
DEFAULT_SGLANG_PY = os.environ.get("SGLANG_PYTHON", "/tmp/sglvenv-clean/bin/python")

DS = ["--model-preset", "deepseek-v3.1"]
# (case name, dcpctl plan flags); a PD plan is checked on its own side's node 0
CASES: list[tuple[str, list[str]]] = [
    # every GPU deployment preset (tiny-cpu targets the CPU and is not an `sglang serve` deployment)
    *[(f"preset:{p.stem}", ["--preset", p.stem])
      for p in sorted((REPO / "presets/deployments").glob("*.yaml"))
      if "hardware: cpu" not in p.read_text()],
    # DeepSeek-V3.1 TP8 DCP8, one node: hardware x backend x replicate-q
    *[(f"dsv31 {hw} tp8 dcp8 {be or 'default'} rq-{rq}",
       DS + ["--hardware", hw, "--tp-size", "8", "--dcp-size", "8"]
       + (["--dcp-comm-backend", be] if be else [])
       + (["--dcp-replicate-q-proj"] if rq == "on" else ["--no-dcp-replicate-q-proj"]))
      for hw in ("h200-8", "b200-8") for be in (None, "a2a", "ag_rs") for rq in ("off", "on")
      if (be, rq) != ("ag_rs", "on")],  # replicated Q with ag_rs: both dcpctl and SGLang reject it
    # attention DP: TP8, 2 attention-DP replicas of attn_tp 4, DCP4 inside each
    ("dsv31 h200-8 tp8 attn-dp2 dcp4", DS + ["--hardware", "h200-8", "--tp-size", "8", "--attn-dp-size", "2",
                                             "--dcp-size", "4"]),
    ("dsv31 b200-8 tp8 attn-dp2 dcp4", DS + ["--hardware", "b200-8", "--tp-size", "8", "--attn-dp-size", "2",
                                             "--dcp-size", "4"]),
    # two nodes without MNNVL: TP16 over 2x h200-8, DCP8
    ("dsv31 2x h200-8 tp16 dcp8", DS + ["--hardware", "h200-8", "--tp-size", "16", "--nnodes", "2",
                                        "--dcp-size", "8"]),
    # PD disaggregation, decode side DCP8 (prefill peer DCP1)
    ("dsv31 h200-8 PD-decode tp8 dcp8", DS + ["--hardware", "h200-8", "--tp-size", "8", "--dcp-size", "8",
                                              "--disaggregation-mode", "decode",
                                              "--disaggregation-peer-dcp-size", "1",
                                              "--disaggregation-transfer-backend", "mooncake"]),
    # fp8 KV cache + page 64 on H200
    ("dsv31 h200-8 tp8 dcp8 fp8kv page64", DS + ["--hardware", "h200-8", "--tp-size", "8", "--dcp-size", "8",
                                                 "--kv-cache-dtype", "fp8_e4m3", "--page-size", "64"]),
    # speculative decoding: SGLang's EAGLE family takes steps, top-k and draft tokens together
    *[(f"dsv31 h200-8 tp8 dcp8 {algo} k4", DS + ["--hardware", "h200-8", "--tp-size", "8", "--dcp-size", "8",
                                                 "--speculative-algorithm", algo, "--speculative-num-steps",
                                                 "3", "--speculative-eagle-topk", "1",
                                                 "--speculative-num-draft-tokens", "4"])
      for algo in ("EAGLE", "NEXTN")],
    *[(f"dsv31 h200-8 tp8 dcp8 {algo} defaults",
       DS + ["--hardware", "h200-8", "--tp-size", "8", "--dcp-size", "8",
             "--speculative-algorithm", algo]) for algo in ("EAGLE", "NEXTN")],
    # `sglang serve` flags dcpctl passes through or reads under SGLang's spelling (--tp, --context-length,
    # ...)
    ("dsv31 h200-8 sglang flags",
     DS + ["--hardware", "h200-8", "--tp", "8", "--dcp-size", "8", "--trust-remote-code",
           "--context-length", "65536", "--chunked-prefill-size", "8192",
           "--attention-backend", "flashmla", "--enable-metrics"]),
    ("dsv31 b200-8 sglang flags", DS + ["--hardware", "b200-8", "--tp", "8", "--dcp-size", "4",
                                        "--decode-attention-backend", "flashinfer", "--schedule-policy",
                                        "lpm", "--max-prefill-tokens", "16384"]),
    # Kimi K3 with a user backend / replicated Q off: SGLang's K3 override keeps both, and so does dcpctl
    ("kimi-k3 32gpu user ag_rs", ["--preset", "kimi-k3-32gpu-dpa-dcp8", "--dcp-comm-backend", "ag_rs"]),
    ("kimi-k3 32gpu no-rq", ["--preset", "kimi-k3-32gpu-dpa-dcp8", "--no-dcp-replicate-q-proj"]),
]

FIELDS = ["tp", "dp", "attn_dp", "dcp", "dcp_backend", "rep_q", "ep", "pp", "nnodes", "page", "kv_dtype",
          "decode_attn"]

FLASHINFER_STUB = ('"""Import-only FlashInfer stub (check_exports.py): the signature SGLang\'s Kimi K3 DCP '
                   'check reads."""\n')
FLASHINFER_DECODE_STUB = ("def trtllm_batch_decode_with_kv_cache_mla(query=None, kv_cache=None, "
                          "enable_dcp=False, **kwargs):\n"
                          '    raise RuntimeError("flashinfer stub: config-time resolution only")\n')


# ----------------------------------------------------------------------------------------- SGLang side
# (worker)

def install_platform(sm: int) -> None:
    """Inside the SGLang venv: SGLang's platform facts for an SM90 (Hopper) or SM100 (Blackwell) GPU; 0:
    none."""
    if not sm:
        return
    from sglang.srt.runtime_context import override_platform
    facts = dict(is_cuda=True, is_hip=False, is_npu=False, is_xpu=False, is_musa=False, is_mps=False,
                 has_amx=False, has_flashinfer=False, is_sm120=False, is_sm110=False)
    if sm >= 100:
        facts.update(is_sm90=False, is_sm100=True, is_sm100_or_sm110=True, is_blackwell=True,
                     is_hopper_with_cuda_12_3=False, device_sm=sm, device_capability=(sm // 10, sm % 10))
    else:
        facts.update(is_sm90=True, is_sm100=False, is_sm100_or_sm110=False, is_blackwell=False,
                     is_hopper_with_cuda_12_3=True, device_sm=sm, device_capability=(sm // 10, sm % 10))
    override_platform(**facts).install()


def worker(sm: int, argv: list[str]) -> None:
    """Runs inside the SGLang venv: emulate the platform, parse + resolve argv, print one RESULT line."""
    import logging
    import warnings
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    t0 = time.time()
    install_platform(sm)
    from sglang.srt.server_args import prepare_server_args
    out: dict = {"accepted": False}
    try:
        sa = prepare_server_args(argv)
        sa.resolve_once()
        d = sa.resolved_dict()
        out = {"accepted": True, "resolved": {k: d.get(k) for k in (
            "device", "tp_size", "dp_size", "attn_dp_size", "enable_dp_attention", "dcp_size",
            "dcp_comm_backend", "dcp_replicate_q_proj", "ep_size", "pp_size", "nnodes", "node_rank",
            "page_size", "kv_cache_dtype", "attention_backend", "decode_attention_backend",
            "prefill_attention_backend", "enable_symm_mem", "disaggregation_mode", "context_length")}}
    except SystemExit as e:  # argparse rejects with SystemExit(2) after printing to stderr
        out["error"] = f"argparse exit {e.code}"
    except BaseException as e:  # noqa: BLE001 - any rejection is a result
        out["error"] = f"{type(e).__name__}: {e}"
    out["seconds"] = round(time.time() - t0, 1)
    print("RESULT " + json.dumps(out, default=str), flush=True)


# ----------------------------------------------------------------------------------------- dcpctl side

def dcpctl(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("dcpctl", path=str(Path(sys.executable).parent)) or "dcpctl"
    return subprocess.run([exe, *args], capture_output=True, text=True, cwd=REPO)


def model_dir(name: str, root: Path) -> Path:
    import yaml
    d = root / "models" / name
    with _LOCK:
        if d.exists():
            return d
        d.mkdir(parents=True)
        cfg = yaml.safe_load((REPO / "presets/models" / f"{name}.yaml").read_text())["config"]
        (d / "config.json").write_text(json.dumps(cfg, indent=1))
        return d


def flashinfer_stub(root: Path) -> Path:
    d = root / "fistub"
    with _LOCK:
        if d.exists():
            return d
        (d / "flashinfer").mkdir(parents=True)
        (d / "flashinfer/__init__.py").write_text(FLASHINFER_STUB)
        (d / "flashinfer/decode.py").write_text(FLASHINFER_DECODE_STUB)
        return d


def exported_argv(flags: list[str], out: Path, role: str) -> tuple[dict, list[str]]:
    r = dcpctl("export", "sglang", *flags, "--served-model-path", "SERVED_MODEL", "-o", str(out))
    if r.returncode:
        raise RuntimeError(f"dcpctl export failed: {(r.stderr or r.stdout).strip()[-300:]}")
    script = out / ("node-0.sh" if role == "null" else f"{role}-node-0.sh")
    line = [x for x in script.read_text().splitlines() if x and not x.startswith("#")][-1]
    toks = shlex.split(line)
    env = {}
    while "=" in toks[0] and not toks[0].startswith("-"):
        k, _, v = toks.pop(0).partition("=")
        env[k] = v
    assert toks[:2] == ["sglang", "serve"], toks[:3]
    return env, toks[2:]


def expected(plan: dict) -> dict:
    t, d = plan["topology"], plan["decisions"]
    kv = d["kv_cache_dtype"]["value"]
    # dcpctl spells attention DP the old way (dp_size N + enable_dp_attention); SGLang 0.5.23 resolves
    # `--attn-dp-size N` to attn_dp_size N and keeps dp_size (whole-engine DP replicas) at 1.
    dp = 1 if t["enable_dp_attention"] else t["dp_size"]
    return {"tp": t["tp_size"], "dp": dp, "attn_dp": t["attn_dp_size"], "dcp": t["dcp_size"],
            "dcp_backend": d["dcp_comm_backend"]["value"], "rep_q": d["dcp_replicate_q_proj"]["value"],
            "ep": t["ep_size"], "pp": t["pp_size"], "nnodes": t["nnodes"], "page": d["page_size"]["value"],
            "kv_dtype": kv, "decode_attn": d["decode_attention_backend"]["value"]}


def actual(res: dict, plan: dict) -> dict:
    dec = res.get("decode_attention_backend") or res.get("attention_backend")
    kv = res.get("kv_cache_dtype")
    if kv == "auto":  # SGLang's auto = the model's dtype, which is what dcpctl writes out
        kv = f"auto={plan['model']['dtype']}"
    attn_dp = res.get("attn_dp_size")
    if attn_dp is None:
        attn_dp = res.get("dp_size") if res.get("enable_dp_attention") else 1
    return {"tp": res.get("tp_size"), "dp": res.get("dp_size"), "attn_dp": attn_dp,
            "dcp": res.get("dcp_size"), "dcp_backend": res.get("dcp_comm_backend"),
            "rep_q": res.get("dcp_replicate_q_proj"), "ep": res.get("ep_size"), "pp": res.get("pp_size"),
            "nnodes": res.get("nnodes"), "page": res.get("page_size"), "kv_dtype": kv, "decode_attn": dec}


def same(field: str, want, got) -> bool:
    if field == "kv_dtype" and isinstance(got, str) and got.startswith("auto="):
        return got[5:] == want
    return want == got


def run_case(name: str, flags: list[str], root: Path, sgl_py: str) -> dict:
    row: dict = {"case": name, "flags": flags}
    p = dcpctl("plan", *flags, "--format", "json")
    plan = json.loads(p.stdout) if p.stdout.strip().startswith("{") else None
    if not plan or not plan.get("valid"):
        row.update(accepted=False, error="dcpctl plan invalid: " + (p.stdout + p.stderr)[-300:])
        return row
    row["warnings"] = plan.get("warnings", [])
    role = plan["request"].get("disaggregation_mode") or "null"
    case_dir = root / "cases" / name.replace(" ", "_").replace(":", "_")
    try:
        env, argv = exported_argv(flags, case_dir, role)
    except Exception as e:  # noqa: BLE001
        row.update(accepted=False, error=str(e))
        return row
    mdir = model_dir(plan["model"]["name"], root)
    argv[argv.index("--model-path") + 1] = str(mdir)
    hw = plan["hardware"]
    sm = int(hw.get("sm") or 0)
    if hw.get("device") == "cuda" and "--device" not in argv:
        argv += ["--device", "cuda"]  # torch is CPU-only here: without it SGLang finds no accelerator
    wenv = dict(os.environ)
    notes = []
    if any("KimiK3" in a for a in plan["model"]["architectures"]):
        wenv["PYTHONPATH"] = os.pathsep.join(filter(None,
                                                    [str(flashinfer_stub(root)), wenv.get("PYTHONPATH")]))
        notes.append("flashinfer stub")
    if hw.get("mnnvl"):
        notes.append("MNNVL not emulated (env " + ",".join(sorted(env)) + " not exercised)")
    row.update(hardware=hw["name"], sm=sm, env=env, argv=argv, notes=notes, role=role)
    res = resolve_in_sglang(sgl_py, sm, argv, wenv, root)
    # DCP flags that dcpctl's plan overrode: also hand SGLang the user's own DCP flags (informational)
    row["as_written"] = []
    changed, raw_argv = as_written(flags, argv)
    if changed:
        raw = resolve_in_sglang(sgl_py, sm, raw_argv, wenv, root)
        for user, exp_flag in changed:
            field = "dcp_comm_backend" if user.startswith("--dcp-comm-backend") else "dcp_replicate_q_proj"
            row["as_written"].append({"user": user, "exported": exp_flag, "field": field,
                                      "dcpctl": plan["decisions"][field]["value"],
                                      "accepted": raw["accepted"],
                                      "sglang": raw["resolved"][field] if raw["accepted"] else None,
                                      "error": raw.get("error")})
    if not res["accepted"]:
        row.update(accepted=False, error=res["error"], seconds=res.get("seconds"))
        return row
    want, got = expected(plan), actual(res["resolved"], plan)
    row.update(accepted=True, seconds=res["seconds"], resolved=res["resolved"], expected=want, actual=got,
               diffs={f: (want[f], got[f]) for f in FIELDS if not same(f, want[f], got[f])})
    return row


def resolve_in_sglang(sgl_py: str, sm: int, argv: list[str], env: dict, root: Path) -> dict:
    r = subprocess.run([sgl_py, str(Path(__file__).resolve()), "--worker", str(sm), "--", *argv],
                       capture_output=True, text=True, env=env, cwd=root)
    res = next((json.loads(x[7:]) for x in r.stdout.splitlines() if x.startswith("RESULT ")), None)
    if res is None:
        return {"accepted": False, "error": f"worker crashed (rc {r.returncode}): {r.stderr.strip()[-400:]}"}
    if not res["accepted"] and res["error"].startswith("argparse") and r.stderr.strip():
        res["error"] += ": " + r.stderr.strip().splitlines()[-1]
    return res


def as_written(flags: list[str], argv: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """The DCP flags dcpctl changed ((user flag, exported flag) pairs) and the exported argv with the user's
    own DCP flags put back and the DCP flags the user did not write dropped (left to SGLang to decide)."""
    changed: list[tuple[str, str]] = []
    raw = list(argv)
    i = raw.index("--dcp-comm-backend") if "--dcp-comm-backend" in raw else -1
    if i >= 0:
        if "--dcp-comm-backend" in flags:
            want = flags[flags.index("--dcp-comm-backend") + 1]
            if raw[i + 1] != want:
                changed.append((f"--dcp-comm-backend {want}", f"--dcp-comm-backend {raw[i + 1]}"))
                raw[i + 1] = want
        else:
            del raw[i:i + 2]
    rq = ("--dcp-replicate-q-proj", "--no-dcp-replicate-q-proj")
    user = next((x for x in flags if x in rq), None)
    exp = next((x for x in raw if x in rq), None)
    if exp:
        if user is None:
            raw.remove(exp)
        elif user != exp:
            changed.append((user, exp))
            raw[raw.index(exp)] = user
    return changed, raw


def fmt(v) -> str:
    return {True: "on", False: "off", None: "-"}.get(v, str(v)) if isinstance(v,
                                                                              (bool, type(None))) else str(v)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sglang-python", default=DEFAULT_SGLANG_PY, help="python of the SGLang 0.5.23 venv")
    ap.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1))
    ap.add_argument("--only", help="run only cases whose name contains this")
    ap.add_argument("--json", help="also write every row (argv, resolved values) to this file")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (exports, config.json files)")
    a = ap.parse_args()
    ver = subprocess.run([a.sglang_python, "-c",
                          "import sglang, torch; print(sglang.__version__, torch.__version__)"],
                         capture_output=True, text=True)
    if ver.returncode:
        print(f"SGLang environment broken ({a.sglang_python}): {ver.stderr.strip()[-300:]}", file=sys.stderr)
        return 1
    print(f"sglang/torch: {ver.stdout.strip()}   dcpctl: {dcpctl('--version').stdout.strip()}")
    cases = [c for c in CASES if not a.only or a.only in c[0]]
    root = Path(tempfile.mkdtemp(prefix="dcpctl-sglcheck-"))
    t0 = time.time()
    try:
        with ThreadPoolExecutor(a.jobs) as ex:
            rows = list(ex.map(lambda c: run_case(c[0], c[1], root, a.sglang_python), cases))
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    w = max(len(r["case"]) for r in rows)
    print(f"\n{'case':<{w}}  {'hardware/sm':<16}  ok   " + " ".join(f"{f}" for f in FIELDS))
    for r in rows:
        hw = f"{r.get('hardware', '?')}/{r.get('sm', '?')}"
        if not r.get("accepted"):
            print(f"{r['case']:<{w}}  {hw:<16}  NO   {r.get('error', '')[:400]}")
            continue
        cells = []
        for f in FIELDS:
            want, got = r["expected"][f], r["actual"][f]
            cells.append("=" if f not in r["diffs"] else f"{fmt(want)}!={fmt(got)}")
        print(f"{r['case']:<{w}}  {hw:<16}  yes  " + " ".join(cells))
    print("\n(= : SGLang resolved dcpctl's value; A!=B : dcpctl A, SGLang B)")
    print("\nresolved values (dcpctl's plan value where it differs is shown as A!=B above):")
    for r in rows:
        if r.get("accepted"):
            got = r["actual"]
            extra = [f"{k}={fmt(got[k])}" for k in ("dcp_backend", "rep_q", "page", "kv_dtype",
                                                    "decode_attn")]
            rp = r["resolved"].get("prefill_attention_backend")
            print(f"  {r['case']:<{w}}  " + " ".join(extra) + f" prefill_attn={rp}"
                  + (f"  [{'; '.join(r['notes'])}]" if r["notes"] else "")
                  + (f"  dcpctl warns: {' | '.join(r['warnings'])}" if r["warnings"] else ""))
    written = [(r["case"], w) for r in rows for w in r.get("as_written", [])]
    if written:
        print("\nuser flags dcpctl overrode, handed to SGLang as the user wrote them\n"
              "(informational: the exported argv with the user's own DCP flags; "
              "DCP flags the user did not write are left to SGLang):")
        for case, x in written:
            verdict = (f"SGLang keeps {x['field']}={fmt(x['sglang'])}" if x["accepted"]
                       else f"SGLang rejects: {(x['error'] or '')[:200]}")
            print(f"  {case:<{w}}  user {x['user']!r} -> dcpctl exports {x['exported']!r} "
                  f"({x['field']}={fmt(x['dcpctl'])}); {verdict}")
    n_ok = sum(bool(r.get("accepted")) for r in rows)
    n_diff = sum(bool(r.get("diffs")) for r in rows)
    print(f"\n{n_ok}/{len(rows)} accepted by SGLang; {n_diff} accepted case(s) with field differences; "
          f"{time.time() - t0:.0f}s")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1, default=str))
    return 0 if n_ok == len(rows) else 1


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), sys.argv[4:] if sys.argv[3] == "--" else sys.argv[3:])
    else:
        sys.exit(main())
