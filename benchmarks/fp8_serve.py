"""A block-FP8 checkpoint and its bf16 twin served side by side on one GPU: decode speed, start to ready,
memory.

    python3 -m benchmarks.fp8_serve --out DIR [--work DIR] [--smoke] [--concurrency 1,8,32,64]
                                    [--requests 200] [--budget-s 470]

Writes the DeepSeek-V3-shaped block-FP8 checkpoint of fp8_model_check.write_checkpoint (V3's attention and MLP
dimensions, 3 layers: one dense, two MoE with 16 routed experts, top-8; 128x128 e4m3 blocks) and its bf16 twin
(the same weights dequantized, as the loader dequantizes them: quant.dequantize, rounded to bf16; no
quantization_config). Then, one server at a time (`dcpctl launch --device cuda`, TP 1, CUDA graphs up to the
largest concurrency), each with a Triton cache directory of its own (checkpoints and caches under --work):

| start       | checkpoint | Triton cache                                   |
| ----------- | ---------- | ---------------------------------------------- |
| fp8         | FP8        | empty: every kernel compiles (a first start)   |
| bf16        | bf16 twin  | empty                                          |
| fp8_again   | FP8        | the fp8 start's: a start after the first one   |

fp8 and bf16 each run `dcpctl bench serve` at every concurrency (--requests each, PROMPT-token random prompts,
OUTPUT tokens out); fp8_again only gets ready. Then, budget left, benchmarks/decode_step.py on both
checkpoints: the decode step at every captured batch size (one CUDA-graph replay's GPU time, context PROMPT +
OUTPUT / 2). Per start: seconds from process start to the ready line, the Triton kernels its start compiled
into its cache (cubin files), and the GPU memory in use while it serves (nvidia-smi, less what was in use
before). DIR/fp8_serve.json holds everything, DIR/fp8_serve.md the table with the targets (FP8 ITL p50 and
output throughput at least bf16's at every concurrency, start to ready within 1.5x), DIR/logs/ every part's
log. A part that would start past --budget-s is skipped and says so.

--smoke: the built-in trained model quantized block-FP8 (fp8_model_check.write_trained) and its twin, served
on the CPU (float32, both dequantized there), 32-token prompts, 8 tokens out, concurrency 1 and 2: a check of
the script itself, no figures.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.serve_peers import bench_serve
from benchmarks.serve_procs import Run, Server, bench, dcpctl
from dcpctl.launch.cuda_graphs import sglang_decode_sizes

PROMPT, OUTPUT = 1000, 64
ITL_RATIO, READY_RATIO = 1.0, 1.5     # FP8 / bf16: ITL p50 at most 1x, start to ready at most 1.5x


def write_twin(src: Path, d: Path, device: str) -> Path:
    """src's block-FP8 weights dequantized (quant.dequantize, then bf16) into d, without quantization_config;
    written to d's sibling first, then renamed (kept: a second call returns it)."""
    import torch
    from safetensors.torch import load_file, save_file

    from dcpctl.runtime.models.quant import SCALE_SUFFIX, dequantize
    if (d / "model.safetensors").exists():
        return d
    part = d.with_name(d.name + ".partial")
    part.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((src / "config.json").read_text())
    block = tuple(cfg.pop("quantization_config")["weight_block_size"])
    cfg["torch_dtype"] = cfg["dtype"] = "bfloat16"
    (part / "config.json").write_text(json.dumps(cfg, indent=1))
    for f in src.iterdir():
        if "token" in f.name or f.name == "generation_config.json":
            shutil.copy(f, part / f.name)
    tensors = load_file(str(src / "model.safetensors"), device=device)
    out = {}
    for name, t in tensors.items():
        scale = tensors.get(name + SCALE_SUFFIX)
        if not name.endswith(SCALE_SUFFIX):
            out[name] = (t if scale is None else dequantize(t, scale, (0, t.shape[0]), (0, t.shape[1]), block)
                         ).to(torch.bfloat16).cpu()
    save_file(out, str(part / "model.safetensors"), metadata={"format": "pt"})
    part.rename(d)
    return d


def write_checkpoints(out: Path, smoke: bool, device: str) -> dict[str, Path]:
    from benchmarks.fp8_model_check import write_checkpoint, write_trained
    fp8 = write_trained(out / "trained-fp8", device) if smoke else write_checkpoint(out / "v3-fp8", 3, 16)
    return {"fp8": fp8, "bf16": write_twin(fp8, fp8.with_name(fp8.name + "-bf16"), device)}


def gpu_used_mib() -> int | None:
    r = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                       capture_output=True, text=True, check=False) if shutil.which("nvidia-smi") else None
    return int(r.stdout.split()[0]) if r is not None and r.returncode == 0 and r.stdout.strip() else None


def cubins(cache: Path) -> int:
    return sum(1 for _ in cache.rglob("*.cubin")) if cache.exists() else 0


def launch_argv(ckpt: Path, run: Run, max_c: int, prompt: int, output: int) -> list[str]:
    a = ["launch", "--model-path", str(ckpt), "--device", run.device, "--tp-size", "1", "--dcp-size", "1",
         "--port", "0", "--page-size", "64", "--max-running-requests", str(max_c),
         "--max-total-tokens", str(max_c * (prompt + output + 128)), "--dtype",
         "float32" if run.smoke else "bfloat16"]
    return dcpctl(*a, *(["--hardware", "cpu"] if run.smoke else ["--cuda-graph-max-bs-decode", str(max_c)]))


def serve(run: Run, tag: str, ckpt: Path, cache: Path, conc: list[int], requests: int, prompt: int,
          output: int, base_mib: int | None) -> dict[str, Any]:
    """One start of `dcpctl launch` with TRITON_CACHE_DIR=cache: ready time, kernels compiled, then (conc not
    empty) bench serve at each concurrency and the GPU memory in use after."""
    if run.left() < 60:
        run.record(tag, None, 0, "skipped: budget spent")
        return {"skipped": "budget"}
    before = cubins(cache)
    os.environ["TRITON_CACHE_DIR"] = str(cache)   # inherited by the launcher's torchrun and ranks
    try:
        srv = Server(launch_argv(ckpt, run, max(conc or [1]), prompt, output), run.logs / f"{tag}.log",
                     min(600, run.left()))
    finally:
        os.environ.pop("TRITON_CACHE_DIR")
    res: dict[str, Any] = {"checkpoint": str(ckpt), "ready_s": srv.ready_s, "triton_cache": str(cache),
                           "cubins_before": before, "cubins_compiled": cubins(cache) - before, "bench": {}}
    for c in conc if srv.url else []:
        res["bench"][str(c)] = bench_serve(run, f"{tag}-c{c}", srv.url, c, max(requests, c), prompt, output,
                                           c)
    used = gpu_used_mib() if srv.url else None
    res["gpu_mib_in_use"] = used - base_mib if used is not None and base_mib is not None else None
    rc = srv.stop()
    run.record(tag, rc if srv.url else None, time.monotonic() - srv.t0,
               f"ready in {srv.ready_s:.1f} s" if srv.url else "never ready (see its log)")
    return res


def step_part(run: Run, tag: str, ckpt: Path, cache: Path, batches: list[int],
              context: int) -> dict[str, Any] | None:
    """benchmarks/decode_step.py on ckpt (Triton cache: the start's, already compiled): the decode step's time
    at each batch size, one CUDA-graph replay's GPU time on cuda (eager on the CPU)."""
    path = run.out / f"step-{tag}.json"
    argv = bench("decode_step", str(ckpt), "--device", run.device, "--batches", ",".join(map(str, batches)),
                 "--contexts", str(context), "--steps", "10", "--warmup", "3", "-o", str(path))
    argv += ["--dtype", "float32"] if run.smoke else ["--cuda-graphs"]
    os.environ["TRITON_CACHE_DIR"] = str(cache)
    try:
        rc, _ = run.cmd(f"step-{tag}", argv, timeout=240)
    finally:
        os.environ.pop("TRITON_CACHE_DIR")
    return json.loads(path.read_text()) if rc == 0 and path.exists() else None


def _p50(r: dict | None, key: str) -> float | None:
    return r[key]["p50"] if isinstance(r, dict) and r.get("completed") else None


def _thr(r: dict | None) -> float | None:
    return r["output_token_throughput"] if isinstance(r, dict) and r.get("completed") else None


def summarize(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of the table: (what, fp8, bf16, fp8 / bf16, target, met); a row with a missing side has met
    None."""
    s = doc["starts"]
    f, b = s.get("fp8", {}), s.get("bf16", {})
    rows = []

    def row(what: str, x: float | None, y: float | None, target: str, ok) -> None:
        r = x / y if x is not None and y else None
        rows.append({"what": what, "fp8": x, "bf16": y, "fp8_over_bf16": r, "target": target,
                     "met": None if r is None or ok is None else ok(r)})
    for c in doc["concurrency"]:
        fr, br = f.get("bench", {}).get(str(c)), b.get("bench", {}).get(str(c))
        row(f"ITL p50 ms, concurrency {c}", _p50(fr, "itl_ms"), _p50(br, "itl_ms"), f"<= {ITL_RATIO}",
            lambda r: r <= ITL_RATIO)
        row(f"output tok/s, concurrency {c}", _thr(fr), _thr(br), ">= 1", lambda r: r >= 1.0)
        row(f"TTFT p50 ms, concurrency {c}", _p50(fr, "ttft_ms"), _p50(br, "ttft_ms"), "", None)
    row("start to ready s (first start)", f.get("ready_s"), b.get("ready_s"), f"<= {READY_RATIO}",
        lambda r: r <= READY_RATIO)
    row("start to ready s (fp8: a start after the first)", s.get("fp8_again", {}).get("ready_s"),
        b.get("ready_s"), f"<= {READY_RATIO}", lambda r: r <= READY_RATIO)
    steps = {k: {r["batch"]: r.get("graph_ms", r.get("step_ms"))
                 for r in (doc.get("step", {}).get(k) or {}).get("rows", [])}
             for k in ("fp8", "bf16")}
    for bs in sorted(steps["fp8"]):
        row(f"decode step ms, batch {bs} (decode_step.py)", steps["fp8"][bs], steps["bf16"].get(bs),
            f"<= {ITL_RATIO}", lambda r: r <= ITL_RATIO)
    row("Triton kernels compiled at start", f.get("cubins_compiled"), b.get("cubins_compiled"), "", None)
    row("GPU MiB in use while serving", f.get("gpu_mib_in_use"), b.get("gpu_mib_in_use"), "", None)
    return rows


def markdown(doc: dict[str, Any]) -> str:
    fmt = lambda x: "-" if x is None else f"{x:.3g}" if isinstance(x, float) else str(x)   # noqa: E731
    lines = [f"FP8 vs its bf16 twin ({doc['checkpoints']['fp8']}), {doc['requests']} requests per "
             f"concurrency, {doc['prompt']}-token prompts, {doc['output']} tokens "
             f"out{' (SMOKE: CPU, no figures)' if doc['smoke'] else ''}",
             "", "| | FP8 | bf16 twin | FP8 / bf16 | target | met |",
             "| --- | ---: | ---: | ---: | --- | --- |"]
    lines += [f"| {r['what']} | {fmt(r['fp8'])} | {fmt(r['bf16'])} | {fmt(r['fp8_over_bf16'])} | "
              f"{r['target']} | {fmt(r['met'])} |" for r in doc["summary"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--work", type=Path, help="checkpoints (7.5 GB) and Triton caches (default: OUT/work)")
    ap.add_argument("--smoke", action="store_true", help="CPU, the tiny trained model: a check of the script")
    ap.add_argument("--concurrency", help="comma list (default 1,8,32,64; smoke 1,2)")
    ap.add_argument("--requests", type=int, help="per concurrency (default 200; smoke 4)")
    ap.add_argument("--budget-s", type=float, default=470.0, help="parts that would start later are skipped")
    args = ap.parse_args(argv)
    conc = [int(c) for c in (args.concurrency or ("1,2" if args.smoke else "1,8,32,64")).split(",")]
    requests = args.requests or (4 if args.smoke else 200)
    prompt, output = (32, 8) if args.smoke else (PROMPT, OUTPUT)
    run = Run(args.out, args.budget_s, args.smoke)
    t0 = time.monotonic()
    work = args.work or args.out / "work"
    for cache in ("triton-fp8", "triton-bf16"):   # a first start finds nothing compiled (a rerun on this
                                                  # machine)
        shutil.rmtree(work / cache, ignore_errors=True)
    ckpts = write_checkpoints(work, args.smoke, run.device)
    run.record("write checkpoints", 0, time.monotonic() - t0)
    doc: dict[str, Any] = {"smoke": args.smoke, "concurrency": conc, "requests": requests, "prompt": prompt,
                           "output": output, "checkpoints": {k: str(v) for k, v in ckpts.items()},
                           "gpu_mib_in_use_before": gpu_used_mib(), "starts": {}}
    for tag, ckpt, cache, c in (("fp8", "fp8", "triton-fp8", conc), ("bf16", "bf16", "triton-bf16", conc),
                                ("fp8_again", "fp8", "triton-fp8", [])):
        doc["starts"][tag] = serve(run, tag, ckpts[ckpt], work / cache, c, requests, prompt, output,
                                   doc["gpu_mib_in_use_before"])
        save(args.out, doc, run)
    batches = [1, 2] if args.smoke else sglang_decode_sizes(max(conc))   # every captured batch size
    doc["step"] = {k: step_part(run, k, ckpts[k], work / f"triton-{k}", batches, prompt + output // 2)
                   for k in ("fp8", "bf16")}
    save(args.out, doc, run)
    print(markdown(doc))
    return 0


def save(out: Path, doc: dict[str, Any], run: Run) -> None:
    doc["parts"], doc["summary"] = run.parts, summarize(doc)
    (out / "fp8_serve.json").write_text(json.dumps(doc, indent=1))
    (out / "fp8_serve.md").write_text(markdown(doc))


if __name__ == "__main__":
    sys.exit(main())
