"""One MoE layer on one GPU: dcpctl's against transformers' DeepseekV3MoE on the same weights, and its GEMMs
alone.

    python3 -m benchmarks.moe_layer [OUT.json] [--tokens 32,1024,2048,8192] [--profile 8192]
                 [--model DIR] [--reps 10]

The checkpoint is serve_peers.py's moe one (DeepSeek-V3 attention shapes, 16 layers: layer 0 dense, 15 MoE of
32 routed experts of width 256, top-8 of 8 groups, one shared expert), unless --model names one; layer 1's MLP
is timed, bf16, on random hidden states of T tokens:

  dcpctl   MoE.__call__: router, the (token, slot) rows sorted by expert, grouped GEMMs (torch._grouped_mm) or
           one chain per expert, the weighted combine, the shared expert
  hf       transformers' DeepseekV3MoE.forward of the same checkpoint (its loop over the experts hit)
  gemms    the routed experts' three grouped GEMMs alone over T x top_k rows already sorted (plus the shared
           expert's): the floor of the grouped form

--profile T,...: one more dcpctl call of T tokens under torch.profiler: its GPU kernels by total time.
Median of --reps calls after two warm-ups, CUDA-event timed.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch

LAYER = 1


def gemms_alone(moe: Any, x: torch.Tensor) -> Callable[[], Any]:
    """The routed experts' grouped GEMMs over x's rows sorted by expert (routing done before), and the shared
    expert: what the grouped form cannot avoid."""
    from dcpctl.runtime.models.mlp import _grouped_gemm, swiglu
    _, idx = moe.router(x)
    order, ends = moe._by_expert(idx)
    ends = ends.to(torch.int32)
    xs = x[order // idx.shape[1]]
    gate_up, down = moe.stacked

    def run() -> Any:
        y = _grouped_gemm(swiglu(_grouped_gemm(xs, gate_up, ends), moe.experts[0].inter), down, ends)
        return y, moe.shared(x) if moe.shared is not None else None
    return run


def main(argv: list[str] | None = None) -> None:
    from benchmarks.prefill_ttft import profiled
    from dcpctl.bench.ceilings import events_ms
    from dcpctl.runtime.models import load_model
    from dcpctl.runtime.parallel import ParallelState
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?")
    ap.add_argument("--tokens", default="32,1024,2048,8192")
    ap.add_argument("--profile", default="", help="token counts to profile once (comma list)")
    ap.add_argument("--model",
                    help="a checkpoint directory (default: serve_peers.py's moe one, written here)")
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        ap.error("needs a CUDA GPU")
    tokens = [int(t) for t in a.tokens.split(",")]
    profile = [int(t) for t in a.profile.split(",") if t]
    tmp = tempfile.TemporaryDirectory()
    if a.model:
        path = Path(a.model)
    else:
        from benchmarks import serve_peers
        path = serve_peers.write_checkpoint("moe", Path(tmp.name) / "moe", "cuda")
    torch.manual_seed(0)
    dev = torch.device("cuda")
    ours = load_model(str(path), ParallelState.single(), False, torch.bfloat16, dev).layers[LAYER].mlp
    from transformers import AutoModelForCausalLM
    hf_model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.bfloat16).to(dev)
    hf = hf_model.model.layers[LAYER].mlp
    D = hf_model.config.hidden_size
    rows: list[dict[str, Any]] = []
    with torch.no_grad():
        for T in tokens:
            x = torch.randn(T, D, device=dev, dtype=torch.bfloat16)
            want, got = hf(x.unsqueeze(0)).squeeze(0), ours(x)
            err = float((got.float() - want.float()).norm() / want.float().norm())
            row = {"tokens": T, "dcpctl_ms": events_ms(lambda: ours(x), a.reps, warmup=2),
                   "hf_ms": events_ms(lambda: hf(x.unsqueeze(0)), a.reps, warmup=2), "rel_err_vs_hf": err}
            if ours.stacked is not None:
                row["gemms_ms"] = events_ms(gemms_alone(ours, x), a.reps, warmup=2)
                row["dcpctl_vs_gemms"] = row["dcpctl_ms"] / row["gemms_ms"]
            row["hf_vs_dcpctl"] = row["hf_ms"] / row["dcpctl_ms"]
            rows.append(row)
            print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}),
                  flush=True)
        profiles = {}
        for T in profile:
            x = torch.randn(T, D, device=dev, dtype=torch.bfloat16)
            profiles[T] = profiled(lambda: ours(x), top=15)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    doc = {"command": " ".join(["python3", "-m", "benchmarks.moe_layer", *(argv or sys.argv[1:])]),
           "commit": commit, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "layer": LAYER, "experts": len(ours.experts), "top_k": ours.router.cfg.top_k, "hidden": D,
           "rows": rows, "profiles": profiles}
    for T, p in profiles.items():
        print(f"profile {T} tokens: wall {p['wall_ms']} ms, GPU kernels {p['gpu_kernel_ms']} ms")
        for k in p["top_kernels"]:
            print(f"  {k['ms']:9.3f} ms {k['calls']:5d}x  {k['name'][:100]}")
    if a.out:
        Path(a.out).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
