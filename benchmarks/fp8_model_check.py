"""A DeepSeek-V3-shaped block-FP8 checkpoint on a GPU: FP8 kept vs dequantized to bf16, and the planned bytes.

    python -m benchmarks.fp8_model_check DIR [--json OUT] [--layers 3] [--experts 16] [--mode w8a16|w8a8]
    python -m benchmarks.fp8_model_check --trained [DIR] [--device cpu] [--json OUT] [--mode w8a16|w8a8]

Writes (once) a random checkpoint with DeepSeek-V3's attention and MLP dimensions (hidden 7168, 128 heads,
q_lora 1536, kv_lora 512, dense intermediate 18432, expert intermediate 2048, YaRN rope), `--layers`
layers of which the first is dense and the rest MoE with `--experts` routed experts (top-8) and one
shared expert, quantized the way DeepSeek's releases are (128x128 blocks, e4m3, scale = amax / 448).
Then loads it on cuda:0 (TP 1) four ways and runs 8 prompts x 8 greedy tokens:

| path       | weights                   | activations                                                       |
| ---------- | ------------------------- | ----------------------------------------------------------------- |
| fp8        | FP8 kept (sm_89+ default) | bf16; --mode w8a8: quantized 1x128 e4m3 by the Triton GEMM        |
| bf16       | dequantized to bf16       | bf16                                                              |
| f64        | dequantized to float64    | float64: the exact reference                                      |
| f64_fp8    | FP8 kept                  | float64, quantized 1x128 e4m3 by torch, then float64 math: the    |
|            |                           | w8a8 method's own arithmetic, exactly                             |

--mode (default w8a16; fp8_parts.MODES) is the fp8 path's method: w8a16 keeps the
activations bf16 (the GEMM converts each e4m3 weight tile), w8a8 quantizes them as DeepSeek and SGLang do.
f64_fp8 is the w8a8 method's floor either way.

bf16 decodes greedily; the other three are fed bf16's tokens (teacher forcing), so every step's logits come
from the same context. Per step (the prefill's last position and each decode step, 9 per prompt) it reports
the norm-relative logit difference ||a - b|| / ||b|| (the target: 2e-2 relative per step) and the max-abs one
over max |b| for fp8 vs bf16; for each path its error against f64; f64_fp8 vs f64 is the error 1x128 e4m3
activation quantization itself makes (no w8a8 kernel can do better), fp8 vs f64_fp8 (under w8a8) what the
kernel and bf16 activations add. Greedy: fp8 decodes freely too; its ids are compared with bf16's on every
prompt, and on the prompts whose bf16 top-2 margin exceeds the sum of both paths' max logit errors (vs f64) at
every step. Also torch.cuda.memory_allocated after the fp8 and bf16 loads against the planner's
weight_bytes_per_rank (h200-8 profile), and the eager step time of both (the second of two runs, so compiles
are not counted).

--trained: instead of random weights, the built-in trained model (`dcpctl generate` without --model-path:
tiny DeepSeek-V3-shaped, trained on Python sources) quantized the same way; its dimensions of 64 and 80
(q_lora, kv_lora + rope, expert intermediate) get partial blocks, as DeepSeek's own checkpoints do for 576
(the scale grid is ceil(rows/128) x ceil(cols/128) and the last block covers the remainder; a K of 64 makes
the activation groups 1x64). Prompts are held-out Python source bytes. --device cpu (no GPU needed) runs
the fp8 path as the method's arithmetic in float64 on bf16 activations (the emulation below: w8a8 rows
quantized by torch, w8a16 rows as they are, times the exact e4m3 weights; rounded to bf16 per GEMM as the
kernel's output is), in place of the Triton kernel.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from dcpctl.launch.default_model import default_model
from dcpctl.plan.model import spec_from_path
from dcpctl.plan.topology import Topology
from dcpctl.plan.weights import weight_bytes
from dcpctl.runtime.kernels import fp8_gemm, fp8_parts
from dcpctl.runtime.kernels.fp8_gemm import quantize_rows
from dcpctl.runtime.models import load_model
from dcpctl.runtime.models.config import parse_config
from dcpctl.runtime.parallel import ParallelState
from dcpctl.runtime.tiny import init_tensor, tensor_shapes, tiny_config, write_random_checkpoint

BLOCK = 128
PROMPTS = [[256 + (i % 2), *range(10 + 7 * i, 10 + 7 * i + 5 + i)] for i in range(8)]
STEPS = 8
TARGET = 2e-2   # logits within 2e-2 relative per step


def v3_config(layers: int, experts: int) -> dict:
    return tiny_config(
        hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048, num_hidden_layers=layers,
        num_attention_heads=128, num_key_value_heads=128, q_lora_rank=1536, kv_lora_rank=512,
        qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, n_routed_experts=experts,
        num_experts_per_tok=8, n_group=8, topk_group=4, first_k_dense_replace=1, torch_dtype="bfloat16",
        quantization_config={"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                             "weight_block_size": [BLOCK, BLOCK]})


def _quantize(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # w: [out, in] -> e4m3 [out, in], scale_inv [ceil(out/128), ceil(in/128)] (DeepSeek's layout)
    out, inn = w.shape
    n0, n1 = -(-out // BLOCK), -(-inn // BLOCK)
    padded = torch.zeros(n0 * BLOCK, n1 * BLOCK, device=w.device)
    padded[:out, :inn] = w
    blocks = padded.view(n0, BLOCK, n1, BLOCK)
    scale = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12) / 448.0
    q = (blocks / scale[:, None, :, None]).view(n0 * BLOCK, n1 * BLOCK)[:out, :inn]
    return q.to(torch.float8_e4m3fn).cpu(), scale.cpu()


def _quantized(name: str, shape: tuple[int, ...]) -> bool:
    """Which tensors DeepSeek's releases store in FP8: the 2-D linear weights but embeddings, lm_head,
    router."""
    return (len(shape) == 2 and "embed_tokens" not in name and "lm_head" not in name
            and not name.endswith("mlp.gate.weight"))


def _save(d: Path, weights: dict[str, torch.Tensor], dev: str) -> None:
    tensors = {}
    for name, w in sorted(weights.items()):
        if _quantized(name, tuple(w.shape)):
            tensors[name], tensors[name + "_scale_inv"] = _quantize(w.float().to(dev))
        else:
            tensors[name] = w.to(torch.bfloat16)
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})


def write_checkpoint(d: Path, layers: int, experts: int) -> Path:
    """The random V3-shaped block-FP8 checkpoint in d (kept: a second call returns it), drawn on the GPU (2.5B
    numbers: minutes on the CPU) and written to d's sibling first, then renamed: a write cut short leaves no
    d."""
    if (d / "model.safetensors").exists():
        return d
    part = d.with_name(d.name + ".partial")
    cfg = v3_config(layers, experts)
    write_random_checkpoint(part, cfg, {}, 0, zero_specials=True)   # config, tokenizer (weights below)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(dev).manual_seed(0)
    with torch.device(dev):
        _save(part, {name: init_tensor(name, shape, g, zero_specials=True)
                     for name, shape in tensor_shapes(parse_config(cfg)).items()}, dev)
    part.rename(d)
    return d


def write_trained(d: Path, dev: str, fp8: bool = True) -> Path:
    """The built-in trained checkpoint (stored float32) with its linear weights block-FP8 (128x128, partial
    blocks at the edges) and every other tensor bf16, as DeepSeek's FP8 releases; fp8=False: its bf16 form,
    every tensor the trained one rounded to bf16 (what a bf16 release of the same training would hold)."""
    src = default_model().path
    d.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((src / "config.json").read_text())
    if fp8:
        cfg["quantization_config"] = v3_config(1, 8)["quantization_config"]
    cfg["dtype"] = cfg["torch_dtype"] = "bfloat16"   # what the tensors that are not FP8 are stored in
    (d / "config.json").write_text(json.dumps(cfg, indent=1))
    for f in src.iterdir():
        if "token" in f.name or f.name == "generation_config.json":
            (d / f.name).write_bytes(f.read_bytes())
    weights = load_file(str(src / "model.safetensors"))
    if fp8:
        _save(d, weights, dev)
    else:
        save_file({k: w.to(torch.bfloat16) for k, w in weights.items()}, str(d / "model.safetensors"),
                  metadata={"format": "pt"})
    return d


def trained_prompts() -> list[list[int]]:
    """8 prompts of held-out Python source (BOS, then 24-38 bytes from 8 places of heldout.txt)."""
    text = (default_model().path / "heldout.txt").read_bytes()
    return [[256, *text[i * 240:i * 240 + 24 + 2 * i]] for i in range(8)]


def _sync(dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()


def _load(d: Path, keep: bool, dtype: torch.dtype, dev: str):
    cuda = dev == "cuda"
    if cuda:
        torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated() if cuda else 0
    m = load_model(d, ParallelState.single(), False, dtype, dev, keep_fp8=keep)
    _sync(dev)
    return m, torch.cuda.memory_allocated() - before if cuda else None


def _run(m, prompts, dev: str, forced=None, timed=True):
    # -> (logits per prompt [STEPS + 1, V] float64: the prefill's last position, then each step; ids; s/step;
    # the routed experts of every MoE call, recorded_routes)
    from tests.runtime.ref_context import greedy_run
    if timed:
        greedy_run(m, prompts, STEPS, forced=forced)   # first run compiles the kernels for every row count
        _sync(dev)
    t0 = time.perf_counter()
    with recorded_routes() as routes:
        pre, dec, ids = greedy_run(m, prompts, STEPS, forced=forced)
    _sync(dev)
    step = (time.perf_counter() - t0) / (STEPS + 1)
    return [torch.cat([p[-1:], d]).double().cpu() for p, d in zip(pre, dec)], ids, step, routes


@contextlib.contextmanager
def recorded_routes():
    """Every Router call's chosen experts (sorted per row), in call order, while the block runs."""
    from dcpctl.runtime.models import mlp
    calls: list[torch.Tensor] = []
    plain = mlp.Router.__call__

    def record(self, x):
        w, idx = plain(self, x)
        calls.append(idx.sort(-1).values.cpu())
        return w, idx
    mlp.Router.__call__ = record
    try:
        yield calls
    finally:
        mlp.Router.__call__ = plain


def routing_differs(a: list[torch.Tensor], b: list[torch.Tensor], lens: list[int],
                    steps: int = STEPS) -> list[list[bool]]:
    """[prompt][step]: whether any MoE layer chose other experts for this step's token or an earlier one of
    its prompt. Calls: forward f (0: the prefill of all prompts, f >= 1: decode step f of `steps`, one row a
    prompt) makes one call per MoE layer; step s's logits come from forward s."""
    per = len(a) // (steps + 1)
    starts = [sum(lens[:p]) for p in range(len(lens))]
    out = []
    for p, n in enumerate(lens):
        seen = any(not torch.equal(a[j][starts[p]:starts[p] + n],
                                   b[j][starts[p]:starts[p] + n]) for j in range(per))
        row = [seen]
        for f in range(1, steps + 1):
            seen = seen or any(not torch.equal(a[f * per + j][p], b[f * per + j][p]) for j in range(per))
            row.append(seen)
        out.append(row)
    return out


def emulated_fp8_matmul(x, w8, scale, block, ends=None, mode="w8a8", **_):
    """The FP8 GEMM's arithmetic in float64, exact products with the e4m3 weights times their factors: w8a8
    rows quantized 1x128 e4m3 (quantize_rows), w8a16 rows as they are."""
    (b0, b1), K = block, x.shape[1]
    if mode == "w8a16":
        xq = x.double()
    else:
        x8, xs = quantize_rows(x, b1)
        xq = x8.double() * xs.double().repeat_interleave(b1, 1)[:, :K]

    def real(w, s):
        return w.double() * s.double().repeat_interleave(b0, 0).repeat_interleave(b1, 1)[:w.shape[0], :K]
    if ends is None:
        return (xq @ real(w8, scale).T).to(x.dtype)
    out, start = torch.zeros(x.shape[0], w8.shape[1], dtype=x.dtype, device=x.device), 0
    for e, end in enumerate(ends.tolist()):
        out[start:end] = (xq[start:end] @ real(w8[e], scale[e]).T).to(x.dtype)
        start = end
    return out


def norm_rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def _stats(xs: list[float]) -> dict:
    xs = sorted(xs)
    return {"median": round(xs[len(xs) // 2], 5), "max": round(xs[-1], 5)}


def compare(logits: dict[str, list[torch.Tensor]], ids8: list[list[int]], ids16: list[list[int]],
            rerouted: list[list[bool]] | None = None) -> dict:
    """logits[path][prompt]: [steps, V] on bf16's tokens for the paths fp8, bf16, f64, f64_fp8; rerouted
    [prompt][step]: routing_differs of fp8 vs bf16."""
    L8, L16, L64, Le = (logits[k] for k in ("fp8", "bf16", "f64", "f64_fp8"))
    steps = [(p, s) for p in range(len(L16)) for s in range(L16[p].shape[0])]
    decided = []
    for p in range(len(L16)):
        top2 = L16[p].topk(2, dim=-1).values
        err = (L8[p] - L64[p]).abs().amax(-1) + (L16[p] - L64[p]).abs().amax(-1)
        decided.append(bool((top2[:, 0] - top2[:, 1] > err)[:len(ids16[p])].all()))
    equal = [a == b for a, b in zip(ids8, ids16)]
    per_step = [norm_rel(L8[p][s], L16[p][s]) for p, s in steps]
    return {
        "fp8_vs_bf16_norm_rel": _stats(per_step),
        f"steps with fp8_vs_bf16_norm_rel <= {TARGET}":
            f"{sum(e <= TARGET for e in per_step)}/{len(per_step)}",
        "fp8_vs_bf16_max_rel": _stats([((L8[p][s] - L16[p][s]).abs().max() / L16[p][s].abs().max()).item()
                                       for p, s in steps]),
        "fp8_vs_f64_norm_rel": _stats([norm_rel(L8[p][s], L64[p][s]) for p, s in steps]),
        "bf16_vs_f64_norm_rel": _stats([norm_rel(L16[p][s], L64[p][s]) for p, s in steps]),
        "f64_fp8_vs_f64_norm_rel (activation quantization itself)":
            _stats([norm_rel(Le[p][s], L64[p][s]) for p, s in steps]),
        "fp8_vs_f64_fp8_norm_rel (the fp8 path vs the w8a8 method in float64)":
            _stats([norm_rel(L8[p][s], Le[p][s]) for p, s in steps]),
        **({} if rerouted is None else _rerouted(per_step, [rerouted[p][s] for p, s in steps])),
        "greedy_prompts_equal": f"{sum(equal)}/{len(equal)}",
        "prompts_decided (bf16 top-2 margin > both paths' max error vs f64, every step)":
            f"{sum(decided)}/{len(decided)}",
        "greedy_equal_on_decided": f"{sum(e for e, d in zip(equal, decided) if d)}/{sum(decided)}",
    }


def _rerouted(err: list[float], moved: list[bool]) -> dict:
    over = [m for e, m in zip(err, moved) if e > TARGET]
    same = [e for e, m in zip(err, moved) if not m]
    return {"steps over the target with other experts in their context (fp8 vs bf16)":
            f"{sum(over)}/{len(over)}",
            "steps with the same experts in their whole context": f"{len(same)}/{len(err)}",
            "fp8_vs_bf16_norm_rel on those": _stats(same) if same else None}


def _profile(m, name: str, prompts) -> None:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        _run(m, prompts, "cuda", timed=False)
        torch.cuda.synchronize()
    for key in ("self_cuda_time_total", "cpu_time_total"):
        print(f"== {name}: one greedy run, top ops by {key}", file=sys.stderr)
        print(prof.key_averages().table(sort_by=key, row_limit=12, max_name_column_width=60), file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", nargs="?", help="where the checkpoint is written (default: a temporary directory)")
    ap.add_argument("--json")
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--trained", action="store_true", help="the built-in trained model, quantized block-FP8")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: the fp8 path is the FP8 method emulated in float64 on bf16 activations")
    ap.add_argument("--profile", action="store_true", help="print the top ops of one fp8 and one bf16 run")
    ap.add_argument("--mode", choices=fp8_parts.MODES, default="w8a16",
                    help="the fp8 path's one method for every GEMM (default w8a16; "
                         "benchmarks/fp8_accuracy.py judges --fp8-gemm auto)")
    args = ap.parse_args()
    from dcpctl.runtime import settings
    settings.use(replace(settings.current(), fp8_gemm=args.mode))
    mode = fp8_parts.activation_mode()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("fp8_model_check.py: no CUDA GPU here; --device cpu emulates the FP8 GEMM", file=sys.stderr)
        return 2
    if not args.trained and args.dir is None:
        print("fp8_model_check.py: the random V3-shaped check needs DIR (or use --trained)", file=sys.stderr)
        return 2
    t0, dev = time.perf_counter(), args.device
    if args.trained:
        d = write_trained(Path(args.dir or tempfile.mkdtemp(prefix="dcpctl-trained-fp8-")), dev)
        prompts = trained_prompts()
        report: dict = {"checkpoint": f"built-in trained model ({default_model().path.name}) quantized "
                                      "block-FP8",
                        "device": dev,
                        "fp8_path": "Triton kernel" if dev == "cuda" else "float64 emulation, bf16 rows"}
    else:
        d, prompts = write_checkpoint(Path(args.dir), args.layers, args.experts), PROMPTS
        report = {"checkpoint": str(d), "layers": args.layers, "experts": args.experts}
    report["mode"] = mode
    spec = spec_from_path(d)
    logits, ids, routes = {}, {}, {}
    for name, keep, dtype in (("bf16", False, torch.bfloat16), ("f64", False, torch.float64),
                              ("fp8", True, torch.bfloat16), ("f64_fp8", True, torch.float64)):
        m, allocated = _load(d, keep, dtype, dev)
        if name == "f64_fp8" or (keep and dev == "cpu"):   # quant.grouped_linear looks it up at every call
            fp8_gemm.fp8_matmul = functools.partial(emulated_fp8_matmul,
                                                    mode="w8a8" if name == "f64_fp8" else mode)
        logits[name], ids[name], step, routes[name] = _run(m, prompts, dev,
                                                           None if name == "bf16" else ids["bf16"],
                                                           dtype == torch.bfloat16 and dev == "cuda")
        if name == "fp8":
            ids["fp8_free"] = _run(m, prompts, dev, timed=False)[1]
        if args.profile and dtype == torch.bfloat16 and dev == "cuda":
            _profile(m, name, prompts)
        print(f"{name}: loaded and run, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        if dtype == torch.bfloat16:
            report[name] = {"eager_step_s": round(step, 4)} if dev == "cuda" else {}
            if allocated is not None:
                planned = weight_bytes(spec, Topology(), False, keep)
                report[name].update(allocated_bytes=allocated, planned_bytes=planned,
                                    planned_over_allocated=round(planned / allocated, 4))
        del m
    rerouted = routing_differs(routes["fp8"], routes["bf16"],
                               [len(p) for p in prompts]) if routes["bf16"] else None
    report["compare"] = compare(logits, ids["fp8_free"], ids["bf16"], rerouted)
    print(json.dumps(report, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
