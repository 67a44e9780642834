"""The CUDA-graph decode step with each of the step's fusions off, in one process on one GPU.

For every variant (a DCPCTL_UNFUSED value: kernels/fusions.py) the checkpoint is loaded again and each batch's
cell runs as `bench decode --cuda-graphs` runs it (bench/decode_cell.run_cell: eager steps, then the graph's
GPU time over back-to-back replays); the roofline prediction is bench decode's (ceilings measured once in this
run). Prints graph ms, predicted ms and their ratio per variant and batch; JSON to -o.

usage: python3 -m benchmarks.fusion_ab [--model DIR] [--batches 1,8,32] [--context 1032]
       [--variants fused,all,qkv_a,...] [--env-variant "NAME=VAR=VALUE;VAR=VALUE" ...] [-o out.json]
  --env-variant: a variant with settings of its own (DCPCTL_UNFUSED unset unless named), each KEY=VALUE either
  DCPCTL_UNFUSED or a field of the launch config's runtime section (fp8_gemm, blas, mla_configs,
  gemm16_table), e.g. "bmm=DCPCTL_UNFUSED=head_bmm" or "cb=blas=cublas". Every variant runs in this one
  process: a setting torch reads once a process (the cuBLASLt workspace) is no variant's own; time it with one
  process per setting
  without --model the served-step checkpoint is written first (V3 attention, 4 dense layers, bf16, drawn on
  the GPU)
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

FUSED = "fused"   # the variant with every fusion on (DCPCTL_UNFUSED unset)


def write_checkpoint(d: Path) -> Path:
    from benchmarks.serve_peers import write_bf16
    from dcpctl.bench.decode import SHAPES
    return write_bf16(d, dict(SHAPES["v3"], num_hidden_layers=4, first_k_dense_replace=4), "cuda")


RUNTIME_KEYS = ("fp8_gemm", "blas", "mla_configs", "gemm16_table")


def variant_env(v: str) -> tuple[str, dict[str, str]]:
    """A variant's name and environment: "name=VAR=VALUE;VAR=VALUE" (an --env-variant), else a DCPCTL_UNFUSED
    value (FUSED: none)."""
    if "=" not in v:
        return v, ({} if v == FUSED else {"DCPCTL_UNFUSED": v})
    name, _, rest = v.partition("=")
    env = dict(kv.split("=", 1) for kv in rest.split(";") if kv)
    return name, env


def measure(path: str, variants: list[str], batches: list[int], context: int, steps: int,
            warmup: int) -> list[dict]:
    import torch

    from dcpctl.bench.decode import _ceilings
    from dcpctl.bench.decode_cell import predict_ms, run_cell
    from dcpctl.contract.launch_config import RuntimeSection
    from dcpctl.runtime import settings
    from dcpctl.runtime.models import load_model
    from dcpctl.runtime.parallel import ParallelState
    dev, ps = torch.device("cuda"), ParallelState.single()
    consts = _ceilings(dev)
    decisions = {"dcp_comm_backend": "ag_rs", "attention_path": "auto", "dcp_replicate_q_proj": False,
                 "lse_base": "e"}
    rows = []
    for spec in variants:
        v, env = variant_env(spec)
        bad = sorted(set(env) - {"DCPCTL_UNFUSED", *RUNTIME_KEYS})
        if bad:
            raise SystemExit(f"fusion_ab.py: variant {v}: unknown settings {bad}; valid: DCPCTL_UNFUSED, "
                             f"{', '.join(RUNTIME_KEYS)}")
        os.environ.pop("DCPCTL_UNFUSED", None)
        if "DCPCTL_UNFUSED" in env:
            os.environ["DCPCTL_UNFUSED"] = env["DCPCTL_UNFUSED"]
        settings.use(RuntimeSection(**{k: env[k] for k in RUNTIME_KEYS if k in env}))
        model = load_model(path, ps, False, torch.bfloat16, dev)
        for b in batches:
            cell = run_cell(model, ps, decisions, b, context, steps, warmup, 64, dev, True)
            p = predict_ms(path, model.cfg.intermediate_size, 1, 1, "ag_rs", False, b, context, consts,
                           model.cfg.num_layers)
            row = {"variant": v, "env": dict(env, BLAS=str(torch.backends.cuda.preferred_blas_library())),
                   "batch": b, "context": context, **cell, **p}
            if "graph_ms" in row:
                row["graph_vs_predicted"] = row["graph_ms"] / row["predicted_ms"]
            rows.append(row)
            print(f"{v:>20}  B={b:<3} graph {row.get('graph_ms', float('nan')):.3f} ms  eager "
                  f"{row['step_ms']:.3f} ms  predicted {row['predicted_ms']:.3f} ms  ratio "
                  f"{row.get('graph_vs_predicted', float('nan')):.2f}"
                  + (f"  {row['graph_error']}" if "graph_error" in row else ""), flush=True)
        del model
        torch.cuda.empty_cache()
    os.environ.pop("DCPCTL_UNFUSED", None)
    settings.use(RuntimeSection())
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--context", type=int, default=1032)
    ap.add_argument("--variants",
                    default=f"{FUSED},all,qkv_a,q_rope,kv_write,add_norm,v_out,swiglu,embed,head_bmm,overlap")
    ap.add_argument("--env-variant", action="append", default=[],
                    help="NAME=VAR=VALUE;VAR=VALUE (repeatable)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("-o", "--out")
    a = ap.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fusion-ab-") as tmp:
        path = a.model or str(write_checkpoint(Path(tmp) / "v3l4"))
        variants = [v for v in a.variants.split(",") if v] + a.env_variant
        rows = measure(path, variants, [int(b) for b in a.batches.split(",")], a.context, a.steps, a.warmup)
    doc = {"context": a.context, "seconds": round(time.perf_counter() - t0, 1), "rows": rows}
    if a.out:
        Path(a.out).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
