"""One call, one machine: `dcpctl launch` + `bench serve`, the `bench decode` graph step and Hugging Face
`generate` on the same checkpoints, then the served-step ratios (serve_report.py writes them).

    python3 -m benchmarks.serve_peers --out DIR [--smoke] [--cells dense,dense32k,moe] [--variants graph,eager]
                                      [--hf-modes eager,compiled] [--budget-s 540]

Cells (CELLS below): a checkpoint, a prompt length and the concurrencies (= batches) to run at.
  dense     DeepSeek-V3 attention (128 heads, kv_lora 512, rope 64), 4 dense layers (intermediate 2048),
            vocab 264: `write_tiny_model` with `bench decode --shape v3 --layers 4`'s overrides (the same bytes)
  dense32k  the same checkpoint (and server) at 32K-token prompts, concurrency 1 and 8
  moe       the V3 attention shape, 16 layers: layer 0 dense, 15 MoE (32 routed experts of width 256, top-8 of
            4 kept groups out of 8, one shared expert), written in bf16 on the GPU (init_tensor's rules)
  tiny, tiny-moe, tiny-long (--smoke)  the built-in tiny shape, 32-token (tiny-long: 8292) prompts, 8 output
            tokens, on CPU

Per checkpoint: for each server variant (graph, eager = --disable-cuda-graph; only `default` when `dcpctl
launch --help` has no CUDA-graph flags) start `dcpctl launch`, record seconds from process start to the ready
line, the first request's TTFT and the steady TTFT (5 more requests, one at a time, fresh random prompts of
the first cell's length), run `bench serve` per cell and concurrency, stop the server; then `bench decode`
(graph + eager step, roofline prediction) at context prompt + output/2 (the mean decode context; MoE
checkpoints: decode_step.py, the same cell without a prediction); then benchmarks/hf_peer.py at prompts up to
LONG tokens. After every checkpoint's first round: the other server variants, then HF at the longer prompts
(the least needed last, so a tight --budget-s cuts those). Every part records its exit status; a part that
would start past --budget-s is skipped and says so. Writes DIR/serve.json, DIR/serve.md, DIR/logs/.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks import serve_report
from benchmarks.serve_procs import Run, Server, bench, dcpctl

LONG = 8192   # prompts above it: HF runs them last (long prefills, another compile)
MAX_POSITIONS = 40960   # every checkpoint's max_position_embeddings: room for 32K prompts + 64 tokens
MOE = {"n_routed_experts": 32, "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4, "moe_intermediate_size": 256,
       "n_shared_experts": 1, "first_k_dense_replace": 1}
# checkpoint -> (bench decode --shape, layers, extra config overrides or None for a plain dense
# write_tiny_model)
CHECKPOINTS: dict[str, tuple[str, int, dict[str, Any] | None]] = {
    "dense": ("v3", 4, None), "moe": ("v3", 16, MOE), "tiny": ("tiny", 2, None), "tiny-moe": ("tiny", 2, {})}
# cell -> (checkpoint, prompt length, [(concurrency, requests)], hf reps)
CELLS: dict[str, tuple[str, int, list[tuple[int, int]], int]] = {
    "dense": ("dense", 1000, [(1, 8), (8, 24), (32, 64)], 3),
    "dense32k": ("dense", 32768, [(1, 2), (8, 8)], 1),
    "moe": ("moe", 1000, [(1, 8), (8, 24), (32, 64)], 3),
    "tiny": ("tiny", 32, [(1, 3), (2, 4)], 2),
    "tiny-moe": ("tiny-moe", 32, [(1, 3), (2, 4)], 2),
    "tiny-long": ("tiny", LONG + 100, [(1, 1)], 1),
}


def write_checkpoint(name: str, d: Path, device: str) -> Path:
    from dcpctl.bench.decode import SHAPES
    from dcpctl.runtime.tiny import write_tiny_model
    shape, layers, extra = CHECKPOINTS[name]
    # max_position_embeddings: the server refuses prompts past it (the tiny default is 2048); weights
    # unchanged
    overrides = dict(SHAPES[shape], num_hidden_layers=layers, first_k_dense_replace=layers,
                     max_position_embeddings=MAX_POSITIONS)
    if extra is None:          # the weights `bench decode --shape SHAPE --layers N` writes, byte for byte
        return write_tiny_model(d, **overrides)
    return write_bf16(d, {**overrides, **extra}, device)


def write_bf16(d: Path, overrides: dict[str, Any], device: str) -> Path:
    """write_tiny_model's config and init rules (init_tensor), drawn on `device` and stored in bf16: a
    16-layer V3-attention checkpoint in seconds, not minutes of CPU random numbers."""
    import torch
    from safetensors.torch import save_file

    from dcpctl.runtime.models.config import parse_config
    from dcpctl.runtime.tiny import (
        init_tensor,
        tensor_shapes,
        tiny_config,
        write_random_checkpoint,
    )
    cfg = tiny_config(**overrides, torch_dtype="bfloat16")
    write_random_checkpoint(d, cfg, {}, 0, zero_specials=True)        # config, tokenizer (weights below)
    g = torch.Generator(device).manual_seed(0)
    with torch.device(device):
        tensors = {n: init_tensor(n, s, g, True).to(torch.bfloat16).cpu()
                   for n, s in sorted(tensor_shapes(parse_config(cfg)).items())}
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    return d


def launch_flags() -> dict[str, bool]:
    """Which CUDA-graph flags this build's `dcpctl launch` has (older builds lack them)."""
    text = subprocess.run(dcpctl("launch", "--help"), capture_output=True, text=True, check=False).stdout
    return {f: f in text for f in ("--disable-cuda-graph", "--cuda-graph-max-bs-decode")}


def variants(asked: list[str], flags: dict[str, bool]) -> list[str]:
    if not flags["--disable-cuda-graph"]:
        return ["default"]
    return asked


def serve_args(ckpt: Path, cells: list[str], variant: str, flags: dict[str, bool], run: Run) -> list[str]:
    out_len = output_len(run)
    max_c = max(c for name in cells for c, _ in CELLS[name][2])
    tokens = max(max_c * (CELLS[name][1] + out_len + 128) for name in cells)
    a = ["launch", "--model-path", str(ckpt), "--device", run.device, "--tp-size", "1", "--dcp-size", "1",
         "--port", "0", "--page-size", "64", "--max-running-requests", str(max_c), "--max-total-tokens", str(tokens),
         "--dtype", "float32" if run.smoke else "bfloat16"]
    a += ["--hardware", "cpu"] if run.smoke else []
    a += run.serve_args
    if variant == "eager":
        a.append("--disable-cuda-graph")
    elif variant == "graph" and flags["--cuda-graph-max-bs-decode"]:
        a += ["--cuda-graph-max-bs-decode", str(max_c)]
    return dcpctl(*a)


def output_len(run: Run) -> int:
    return 8 if run.smoke else 64


def bench_serve(run: Run, name: str, url: str, c: int, n: int, length: int, out_len: int,
                seed: int) -> dict | None:
    _, out = run.cmd(name, dcpctl("bench", "serve", "--url", url, "--concurrency", str(c), "--requests", str(n),
                                   "--input-len", str(length), "--output-len", str(out_len), "--seed", str(seed),
                                   "--format", "json"), timeout=600)
    try:   # exit 1 (no request completed) still prints the JSON, with the errors
        return json.loads(out) if out.strip() else None
    except ValueError:
        return None


def serve_part(run: Run, ckpt_name: str, ckpt: Path, cells: list[str], variant: str,
               flags: dict[str, bool]) -> dict:
    tag = f"launch-{ckpt_name}-{variant}"
    if run.left() < 30:
        run.record(tag, None, 0, "skipped: budget spent")
        return {"skipped": "budget"}
    srv = Server(serve_args(ckpt, cells, variant, flags, run), run.logs / f"{tag}.log", min(600, run.left()))
    res: dict[str, Any] = {"ready_s": srv.ready_s, "cells": {}}
    if srv.url:
        first_len = CELLS[cells[0]][1]
        res["first"] = bench_serve(run, f"{tag}-first", srv.url, 1, 1, first_len, 2, 1000)
        res["steady"] = bench_serve(run, f"{tag}-steady", srv.url, 1, 5, first_len, 2, 2000)
        for cell in cells:
            _, length, conc, _ = CELLS[cell]
            res["cells"][cell] = {str(c): bench_serve(run, f"{tag}-{cell}-c{c}", srv.url, c, n, length,
                                                      output_len(run), c) for c, n in conc}
    rc = srv.stop()
    run.record(tag, rc if srv.url else None, time.monotonic() - srv.t0,
               f"ready in {srv.ready_s:.1f} s" if srv.url else "never ready (see its log)")
    return res


def decode_part(run: Run, ckpt_name: str, ckpt: Path, cells: list[str]) -> dict | None:
    """`bench decode` for dense shapes (it writes the same checkpoint); decode_step.py on the checkpoint
    itself for MoE ones, which bench decode cannot write (no prediction there)."""
    shape, layers, extra = CHECKPOINTS[ckpt_name]
    batches = ",".join(map(str, sorted({c for name in cells for c, _ in CELLS[name][2]})))
    contexts = ",".join(map(str, sorted({CELLS[name][1] + output_len(run) // 2 for name in cells})))
    path = run.out / f"decode-{ckpt_name}.json"
    common = ["--device", run.device, "--batches", batches, "--contexts", contexts, "--steps", "5", "--warmup", "2",
              "-o", str(path)]
    common += ["--dtype", "float32"] if run.smoke else ["--dtype", "bfloat16", "--page-size", "64",
                                                        "--cuda-graphs"]
    if extra is None:
        argv = dcpctl("bench", "decode", "--tp-size", "1", "--dcp-sizes", "1", "--shape", shape, "--layers",
                      str(layers), *common)
    else:
        argv = bench("decode_step", str(ckpt), *common)
    rc, _ = run.cmd(f"decode-{ckpt_name}", argv)
    return json.loads(path.read_text()) if rc == 0 and path.exists() else None


def hf_part(run: Run, tag: str, ckpt: Path, cells: list[str], modes: list[str]) -> dict | None:
    if not cells or not modes:
        return None
    path = run.out / f"hf-{tag}.json"
    a = [*bench("hf_peer", str(ckpt)), "--device", run.device, "--modes", ",".join(modes),
         "--output-len", str(output_len(run)), "-o", str(path), "--dtype", "float32" if run.smoke else "bfloat16"]
    for name in cells:
        _, length, conc, reps = CELLS[name]
        a += ["--cell", f"{length}:{','.join(str(c) for c, _ in conc)}:{reps}"]
    run.cmd(f"hf-{tag}", a)
    return json.loads(path.read_text()) if path.exists() else None   # hf_peer rewrites it after every row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--smoke", action="store_true",
                    help="CPU, tiny checkpoints: a check of the script itself")
    ap.add_argument("--cells",
                    help=f"comma list from {sorted(CELLS)} (default: dense,dense32k,moe; smoke: tiny)")
    ap.add_argument("--variants", default="graph,eager",
                    help="server variants when launch has CUDA-graph flags")
    ap.add_argument("--hf-modes", default="compiled,eager", help="'' skips Hugging Face")
    ap.add_argument("--budget-s", type=float, default=360.0, help="parts that would start later are skipped")
    ap.add_argument("--ckpt-dir", type=Path, default=Path("/tmp/dcpctl-serve-ckpt"),
                    help="where the checkpoints are written (each is removed once its parts ran)")
    ap.add_argument("--serve-args", default="", help="more `dcpctl launch` flags for every server, e.g. "
                    "'--tokenizer-worker-num 4'")
    args = ap.parse_args(argv)
    cells = (args.cells or ("tiny" if args.smoke else "dense,dense32k,moe")).split(",")
    if bad := [c for c in cells if c not in CELLS]:
        ap.error(f"unknown cells {bad}; valid: {sorted(CELLS)}")
    run = Run(args.out, args.budget_s, args.smoke)
    run.serve_args = args.serve_args.split()
    flags = launch_flags()
    doc: dict[str, Any] = {"smoke": args.smoke, "launch_flags": flags, "serve_args": run.serve_args, "cells": {c: CELLS[c] for c in cells},
                           "output_len": output_len(run), "checkpoints": {}}
    vs, modes = variants(args.variants.split(","), flags), [m for m in args.hf_modes.split(",") if m]
    ckpts: dict[str, Path] = {}
    mine = {k: [c for c in cells if CELLS[c][0] == k] for k in dict.fromkeys(CELLS[c][0] for c in cells)}
    for name, its in mine.items():     # 1. the server variant the targets name, the decode step, HF at short prompts
        if run.left() < 60:
            run.record(f"write-{name}", None, 0, "skipped: budget spent (and every part of this checkpoint)")
            continue
        t0 = time.monotonic()
        ckpts[name] = ckpt = write_checkpoint(name, args.ckpt_dir / name, run.device)
        run.record(f"write-{name}", 0, time.monotonic() - t0)
        entry = doc["checkpoints"][name] = {"serve": {vs[0]: serve_part(run, name, ckpt, its, vs[0], flags)}}
        entry["decode"] = decode_part(run, name, ckpt, its)
        entry["hf"] = hf_part(run, name, ckpt, [c for c in its if CELLS[c][1] <= LONG], modes)
        save(run, doc)
    for name, ckpt in ckpts.items():   # 2. the other server variants
        for v in vs[1:]:
            doc["checkpoints"][name]["serve"][v] = serve_part(run, name, ckpt, mine[name], v, flags)
            save(run, doc)
    for name, ckpt in ckpts.items():   # 3. HF at long prompts (minutes of prefill and compiles)
        long = [c for c in mine[name] if CELLS[c][1] > LONG]
        if long:
            got = hf_part(run, f"{name}-long", ckpt, long, modes)
            hf = doc["checkpoints"][name]["hf"] = doc["checkpoints"][name]["hf"] or {"rows": []}
            hf["rows"] += (got or {}).get("rows", [])
            save(run, doc)
        shutil.rmtree(ckpt, ignore_errors=True)
    print(serve_report.markdown(doc))


def save(run: Run, doc: dict[str, Any]) -> None:
    """serve.json and serve.md as they stand (after every phase: a run cut short keeps what it measured)."""
    doc["parts"] = run.parts
    doc["summary"] = serve_report.summarize(doc)
    (run.out / "serve.json").write_text(json.dumps(doc, indent=2))
    (run.out / "serve.md").write_text(serve_report.markdown(doc))


if __name__ == "__main__":
    main()
