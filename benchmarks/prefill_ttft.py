"""Single-prompt prefill time on one GPU: dcpctl's engine, transformers' sdpa forward, and the MHA-form floor.

    python3 -m benchmarks.prefill_ttft OUT.json [--lengths 4096,16384,32768,65536]
                 [--hf-lengths 16384,32768] [--chunk 8192] [--reps 2] [--model DIR] [--profile 16384,...]
                 [--trace DIR]

The checkpoint is serve_peers.py's dense one (DeepSeek-V3 attention: 128 heads, q_lora 1536, kv_lora 512,
rope 64; 4 dense layers of intermediate 2048; vocab 264; write_bf16's init rules, drawn on the GPU) with
max_position_embeddings 163840, unless --model names one.  In one process:

  dcpctl   the Engine `dcpctl launch` serves with (one rank, bf16, page 64, chunked prefill --chunk, each
           layer's MLP captured at the server's prefill token counts, no decode graphs): one request of N
           prompt tokens and 1 output token, wall time of engine.generate (prompt in -> first token out); the
           first at each length is a warm-up (`cold_ms`)
  hf       transformers' DeepseekV3ForCausalLM (sdpa, bf16) forward of the N tokens (logits of the last)
  floor    per layer (torch SDPA with the cuDNN backend: causal MHA-form attention, 128 heads, q/k 192, v 128;
           plus the layer's projection and MLP GEMMs at N rows: an MoE layer's routed experts as grouped GEMMs
           of N x top_k rows split evenly, its shared expert dense; floor_gemms), each timed alone

--profile N,...: after the timed runs, one more dcpctl prefill of N tokens under torch.profiler: its wall
time, the GPU's busy time and the top kernels by total GPU time (where the time over the floor goes).

Median of --reps timed runs after one warm-up.  JSON: per length {dcpctl_ms, hf_ms, floor_ms, floor parts,
dcpctl/floor, dcpctl/hf}, plus the device, torch, cuDNN and the command line.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

MAX_POSITIONS = 163840
LAYERS = 4


def checkpoint(d: Path) -> Path:
    from benchmarks.serve_peers import write_bf16
    from dcpctl.bench.decode import SHAPES
    return write_bf16(d, dict(SHAPES["v3"], num_hidden_layers=LAYERS, first_k_dense_replace=LAYERS,
                              max_position_embeddings=MAX_POSITIONS), "cuda")


def timed(fn: Callable[[], Any], reps: int) -> tuple[float, float]:
    """(first call ms, median of `reps` further calls ms), synchronized."""
    out = []
    for _ in range(reps + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e3)
    return out[0], statistics.median(out[1:])


def prompt(n: int, vocab: int) -> list[int]:
    g = torch.Generator().manual_seed(n)
    return torch.randint(1, vocab - 8, (n,), generator=g).tolist()


def engine(path: str, capacity: int, chunk: int):
    from dcpctl.contract.launch_config import LaunchConfig
    from dcpctl.launch.cuda_graphs import cuda_graph_section, prefill_section
    from dcpctl.runtime.engine import Engine
    from dcpctl.runtime.models import load_model
    from dcpctl.runtime.parallel import ParallelState
    ps = ParallelState.single()
    cfg = {"version": 1, "model": {"path": path, "dtype": "bfloat16"}, "device": "cuda", "world_size": 1,
           "dist_backend": "nccl",
           "topology": {"tp_size": 1, "attn_tp_size": 1, "attn_dp_size": 1, "dcp_size": 1, "ep_size": 1,
                        "pp_size": 1},
           "groups": {k: [[0]] for k in ("tp", "attn_tp", "attn_dp", "dcp", "ep")},
           "decisions": {"dcp_comm_backend": "ag_rs", "dcp_replicate_q_proj": False, "lse_base": "e"},
           "kv": {"page_size": 64, "capacity_tokens": capacity, "chunked_prefill_size": chunk,
                  "max_running_requests": 4},
           "cuda_graph": {**cuda_graph_section("cuda", True, None, None, 4),
                          **prefill_section("cuda", False, None, None, None, chunk)}}
    model = load_model(path, ps, False, torch.bfloat16, torch.device("cuda"))
    eng = Engine(model, ps, LaunchConfig.from_dict(cfg))
    eng.warm_up()        # the MLP pieces a server captures for its prefills (runtime/models/mlp_graphs.py)
    return eng


def dcpctl_cells(path: str, lengths: list[int], chunk: int, reps: int, vocab: int,
                 profile: list[int], trace_dir: Path | None = None) -> dict[int, dict]:
    eng = engine(path, max(lengths + profile) + 1024, chunk)
    out: dict[int, dict] = {}
    for n in lengths:
        ids = prompt(n, vocab)
        cold, ms = timed(lambda: eng.generate([{"prompt_ids": ids, "max_new_tokens": 1}]), reps)
        out[n] = {"dcpctl_ms": round(ms, 2), "dcpctl_cold_ms": round(cold, 2)}
    for n in profile:
        ids = prompt(n, vocab)
        eng.generate([{"prompt_ids": ids, "max_new_tokens": 1}])      # warm (a no-op when n was timed)
        trace = trace_dir / f"prefill_{n}.json.gz" if trace_dir else None
        out.setdefault(n, {})["dcpctl_profile"] = profiled(lambda: eng.generate([{"prompt_ids": ids,
                                                                                    "max_new_tokens": 1}]),
                                                           trace=trace)
    eng = None    # frees the engine's GPU memory (the timed lambdas close over the name)
    torch.cuda.empty_cache()
    return out


def profiled(fn: Callable[[], Any], top: int = 25, trace: Path | None = None) -> dict[str, Any]:
    """One call of fn under torch.profiler: wall ms, summed GPU kernel ms, and the top kernels by GPU time;
    with `trace`, the profiler's Chrome trace written there (a .gz path is compressed)."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) * 1e3
    if trace is not None:
        trace.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace))
    rows = kernel_totals(prof.events(), 120)
    return {"wall_ms": round(wall, 2), "gpu_kernel_ms": round(sum(ms for _, ms, _ in rows), 2),
            "top_kernels": [{"name": k, "ms": round(ms, 3), "calls": n} for k, ms, n in rows[:top]],
            "host_waits": sync_points(fn)}


def kernel_totals(events: Any, width: int) -> list[tuple[str, float, int]]:
    """The CUDA kernels of profiler events by name (its first `width` characters): (name, total ms, calls),
    the largest total first."""
    kernels: dict[str, list] = {}
    for ev in events:
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            k = kernels.setdefault(ev.name[:width], [0.0, 0])
            k[0] += ev.device_time / 1e3
            k[1] += 1
    return sorted(((k, ms, n) for k, (ms, n) in kernels.items()), key=lambda r: -r[1])


def sync_points(fn: Callable[[], Any]) -> dict[str, int]:
    """Where one call of fn makes the host wait for the GPU (torch's sync debug mode): the innermost dcpctl
    frame of each wait ('module path:line'), with its count."""
    import traceback
    import warnings
    seen: dict[str, int] = {}

    def hook(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
             line: Any = None) -> None:
        frames = [f for f in traceback.extract_stack() if "/dcpctl/" in f.filename]
        key = (f"{frames[-1].filename.rsplit('/dcpctl/', 1)[-1]}:{frames[-1].lineno}"
               if frames else f"{filename}:{lineno}")
        seen[key] = seen.get(key, 0) + 1

    shown = warnings.showwarning
    warnings.showwarning = hook
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            fn()
    finally:
        torch.cuda.set_sync_debug_mode("default")
        warnings.showwarning = shown
    return seen


def hf_cells(path: str, lengths: list[int], reps: int, vocab: int) -> dict[int, dict]:
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16,
                                                              attn_implementation="sdpa").cuda().eval()
    out = {}
    for n in lengths:
        ids = torch.tensor([prompt(n, vocab)], device="cuda")
        try:
            with torch.inference_mode():
                _, ms = timed(lambda: model(ids, use_cache=False, logits_to_keep=1), reps)
            out[n] = {"hf_ms": round(ms, 2)}
        except torch.OutOfMemoryError as e:
            out[n] = {"hf_error": str(e).splitlines()[0]}
        torch.cuda.empty_cache()
    model = None  # frees the GPU memory (the timed lambdas close over the name)
    torch.cuda.empty_cache()
    return out


def floor_gemms(cfg: dict, n: int) -> list[tuple[int, int, int, int, int]]:
    """The projection and MLP GEMMs of one forward of n tokens through the checkpoint's layers, as (layers
    that run it, rows, in, out, groups): every layer's attention projections; a dense layer's MLP; an MoE
    layer's shared expert and its routed experts as grouped GEMMs of n x top_k rows split evenly over the
    experts."""
    H, D, Q, L = cfg["num_attention_heads"], cfg["hidden_size"], cfg["q_lora_rank"], cfg["kv_lora_rank"]
    nope, rope, v = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    layers = cfg["num_hidden_layers"]
    moe = layers - min(layers, cfg.get("first_k_dense_replace", layers)) if cfg.get("n_routed_experts") else 0
    dense, inter = layers - moe, cfg["intermediate_size"]
    out = [(layers, n, kin, kout, 1) for kin, kout in
           ((D, Q + L + rope), (Q, H * (nope + rope)), (L, H * (nope + v)), (H * v, D))]
    out += [(dense, n, D, 2 * inter, 1), (dense, n, inter, D, 1)] if dense else []
    if moe:
        mi, e, k, shared = (cfg["moe_intermediate_size"], cfg["n_routed_experts"], cfg["num_experts_per_tok"],
                            cfg.get("n_shared_experts") or 0)
        out += [(moe, n * k, D, 2 * mi, e), (moe, n * k, mi, D, e)]
        out += [(moe, n, D, 2 * mi * shared, 1), (moe, n, mi * shared, D, 1)] if shared else []
    return out


def floor_cell(n: int, reps: int, cfg: dict) -> dict[str, float]:
    """Every layer's MHA-form causal attention (cuDNN) and GEMMs at n rows (floor_gemms), each timed alone."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    H, nope, rope, v = (cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"],
                        cfg["v_head_dim"])
    layers = cfg["num_hidden_layers"]
    bf = dict(dtype=torch.bfloat16, device="cuda")
    q = torch.randn(1, H, n, nope + rope, **bf)
    k = torch.randn(1, H, n, nope + rope, **bf)
    vv = torch.randn(1, H, n, v, **bf)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION), torch.inference_mode():
        _, attn = timed(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, vv, is_causal=True),
                        reps)
    q = k = vv = None
    gemm = 0.0
    for count, rows, kin, kout, groups in floor_gemms(cfg, n):
        a = torch.randn(rows, kin, **bf)
        if groups == 1:
            w = torch.randn(kout, kin, **bf)
            ms = timed(lambda: a @ w.t(), reps)[1]
        else:        # the routed experts: grouped over rows split evenly, as torch._grouped_mm runs them
            w = torch.randn(groups, kout, kin, **bf)
            ends = torch.linspace(rows / groups, rows, groups, device="cuda").round().to(torch.int32)
            ms = timed(lambda: torch._grouped_mm(a, w.transpose(1, 2), offs=ends), reps)[1]
        gemm += count * ms
        a = w = None
    torch.cuda.empty_cache()
    return {"floor_ms": round(layers * attn + gemm, 2), "floor_attention_ms_per_layer": round(attn, 3),
            "floor_gemms_ms_per_layer": round(gemm / layers, 3)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--lengths", default="4096,16384,32768,65536")
    ap.add_argument("--hf-lengths", default="16384,32768")
    ap.add_argument("--chunk", type=int, default=8192, help="chunked_prefill_size (dcpctl launch's default)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--profile", default="", help="lengths to profile once (comma list; see above)")
    ap.add_argument("--trace", type=Path, help="with --profile: write each profiled call's Chrome trace to "
                    "TRACE/prefill_N.json.gz (GPU idle gaps, host time per op)")
    ap.add_argument("--model",
                    help="a checkpoint directory (default: write the dense one to a temporary folder)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)     # as a server's ranks run (launch/torchrun.py SAFE_ENV: OMP_NUM_THREADS=1)
    lengths = [int(x) for x in args.lengths.split(",") if x]
    hf_lengths = [int(x) for x in args.hf_lengths.split(",") if x]
    rows: dict[int,
               dict] = {n: {}
                        for n in sorted(set(lengths + hf_lengths
                                            + [int(x) for x in args.profile.split(",") if x]))}
    doc = {"command": " ".join(["python3", "-m", "benchmarks.prefill_ttft", *(argv or sys.argv[1:])]),
           "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "chunked_prefill_size": args.chunk,
           "lengths": {str(n): r for n, r in rows.items()}, "errors": {}}
    with tempfile.TemporaryDirectory() as tmp:
        path = args.model or str(checkpoint(Path(tmp)))
        cfg = json.loads((Path(path) / "config.json").read_text())
        vocab, doc["layers"] = cfg["vocab_size"], cfg["num_hidden_layers"]
        profile = [int(x) for x in args.profile.split(",") if x]
        parts = [("dcpctl",
                  lambda: dcpctl_cells(path, lengths, args.chunk, args.reps, vocab, profile, args.trace)),
                 ("hf", lambda: hf_cells(path, hf_lengths, args.reps, vocab)),
                 ("floor", lambda: {n: floor_cell(n, args.reps, cfg) for n in lengths})]
        for name, part in parts:      # a part that fails records its error; the others still run
            try:
                for n, r in part().items():
                    rows[n].update(r)
            except Exception as e:    # noqa: BLE001 - a benchmark reports, it does not stop
                doc["errors"][name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            save(doc, args.out)
    for r in rows.values():
        if "dcpctl_ms" in r and "floor_ms" in r:
            r["dcpctl_over_floor"] = round(r["dcpctl_ms"] / r["floor_ms"], 3)
        if "dcpctl_ms" in r and "hf_ms" in r:
            r["dcpctl_over_hf"] = round(r["dcpctl_ms"] / r["hf_ms"], 3)
    save(doc, args.out)
    print(json.dumps(doc, indent=1))


def save(doc: dict[str, Any], out: str) -> None:
    Path(out).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
