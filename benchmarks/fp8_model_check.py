"""A DeepSeek-V3-shaped block-FP8 checkpoint on a GPU: FP8 kept vs dequantized to bf16, and the planned bytes.

    python benchmarks/fp8_model_check.py DIR [--json OUT] [--layers 3] [--experts 16]

Writes (once) a random checkpoint with DeepSeek-V3's attention and MLP dimensions (hidden 7168, 128 heads,
q_lora 1536, kv_lora 512, dense intermediate 18432, expert intermediate 2048, YaRN rope), `--layers`
layers of which the first is dense and the rest MoE with `--experts` routed experts (top-8) and one
shared expert, quantized the way DeepSeek's releases are (128x128 blocks, e4m3, scale = amax / 448).
Then loads it twice on cuda:0 (TP 1): FP8 kept (the default on sm_89+) and dequantized to bf16, and
reports: torch.cuda.memory_allocated after each load against the planner's weight_bytes_per_rank for the
same config on the h200-8 profile; per-step logits of a greedy run of 8 prompts x 8 tokens (relative max
difference), greedy id agreement, and where they differ whether the bf16 top-2 margin exceeded the
difference between the two paths' logits; eager step time of both (8 prompts; the second of two runs, so compiles are not counted).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from dcpctl.plan import presets
from dcpctl.plan.hardware import resolve_hardware
from dcpctl.plan.model import spec_from_path
from dcpctl.plan.topology import Topology
from dcpctl.plan.weights import weight_bytes
from dcpctl.runtime.models import load_model
from dcpctl.runtime.models.config import parse_config
from dcpctl.runtime.parallel import ParallelState
from dcpctl.runtime.tiny import init_tensor, tensor_shapes, tiny_config, write_random_checkpoint

BLOCK = 128
PROMPTS = [[256 + (i % 2), *range(10 + 7 * i, 10 + 7 * i + 5 + i)] for i in range(8)]
STEPS = 8


def v3_config(layers: int, experts: int) -> dict:
    return tiny_config(
        hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048, num_hidden_layers=layers,
        num_attention_heads=128, num_key_value_heads=128, q_lora_rank=1536, kv_lora_rank=512,
        qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, n_routed_experts=experts,
        num_experts_per_tok=8, n_group=8, topk_group=4, first_k_dense_replace=1, torch_dtype="bfloat16",
        quantization_config={"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                             "weight_block_size": [BLOCK, BLOCK]})


def _quantize(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # w: [out, in] on the GPU -> e4m3 [out, in], scale_inv [ceil(out/128), ceil(in/128)] (DeepSeek's layout)
    out, inn = w.shape
    n0, n1 = -(-out // BLOCK), -(-inn // BLOCK)
    padded = torch.zeros(n0 * BLOCK, n1 * BLOCK, device=w.device)
    padded[:out, :inn] = w
    blocks = padded.view(n0, BLOCK, n1, BLOCK)
    scale = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12) / 448.0
    q = (blocks / scale[:, None, :, None]).view(n0 * BLOCK, n1 * BLOCK)[:out, :inn]
    return q.to(torch.float8_e4m3fn).cpu(), scale.cpu()


def write_checkpoint(d: Path, layers: int, experts: int) -> Path:
    if (d / "model.safetensors").exists():
        return d
    cfg = v3_config(layers, experts)
    write_random_checkpoint(d, cfg, {}, 0, zero_specials=True)   # config, tokenizer (weights below)
    g = torch.Generator().manual_seed(0)
    tensors = {}
    for name, shape in sorted(tensor_shapes(parse_config(cfg)).items()):
        w = init_tensor(name, shape, g, zero_specials=True)
        quantized = len(shape) == 2 and "embed_tokens" not in name and "lm_head" not in name \
            and not name.endswith("mlp.gate.weight")
        if quantized:
            tensors[name], tensors[name + "_scale_inv"] = _quantize(w.cuda())
        else:
            tensors[name] = w.to(torch.bfloat16)
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    return d


def _load(d: Path, keep: bool):
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    m = load_model(d, ParallelState.single(), False, torch.bfloat16, "cuda", keep_fp8=keep)
    torch.cuda.synchronize()
    return m, torch.cuda.memory_allocated() - before


def _run(m):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.runtime.ref_context import greedy_run
    greedy_run(m, PROMPTS, STEPS)   # first run compiles the kernels for every row count
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = greedy_run(m, PROMPTS, STEPS)
    torch.cuda.synchronize()
    return out, (time.perf_counter() - t0) / (STEPS + 1)


def compare(fp8_out, bf16_out) -> dict:
    (_, dec8, ids8), (_, dec16, ids16) = fp8_out, bf16_out
    rel, norm, agree, explained = [], [], 0, 0
    for p in range(len(PROMPTS)):
        same = ids8[p] == ids16[p]
        agree += same
        for s in range(STEPS):
            a, b = dec8[p][s].float(), dec16[p][s].float()
            rel.append(((a - b).abs().max() / b.abs().max()).item())
            norm.append(((a - b).norm() / b.norm()).item())
            if ids8[p][:s] != ids16[p][:s]:
                break   # once the paths have chosen different tokens the contexts differ
        if not same:
            s = next(i for i in range(STEPS) if ids8[p][i] != ids16[p][i])
            b = dec16[p][s].float()
            top2 = b.topk(2).values
            explained += (top2[0] - top2[1]).item() <= 2 * (dec8[p][s].float() - b).abs().max().item()
    return {"max_rel_logit_diff_per_step": max(rel), "median_rel_logit_diff": sorted(rel)[len(rel) // 2],
            "max_norm_rel_logit_diff": max(norm), "median_norm_rel_logit_diff": sorted(norm)[len(norm) // 2],
            "greedy_prompts_equal": f"{agree}/{len(PROMPTS)}",
            "differing_prompts_within_margin_of_error": f"{explained}/{len(PROMPTS) - agree}"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--json")
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--experts", type=int, default=16)
    args = ap.parse_args()
    d = write_checkpoint(Path(args.dir), args.layers, args.experts)
    spec, hw = spec_from_path(d), resolve_hardware("h200-8", presets.hardware_profiles())
    report: dict = {"checkpoint": str(d), "layers": args.layers, "experts": args.experts}
    for name, keep in (("fp8", True), ("bf16_dequantized", False)):
        m, allocated = _load(d, keep)
        planned = weight_bytes(spec, Topology(), False, keep)
        out, step = _run(m)
        report[name] = {"allocated_bytes": allocated, "planned_bytes": planned,
                        "planned_over_allocated": round(planned / allocated, 4), "eager_step_s": round(step, 4)}
        report[name + "_out"] = out
        del m
    report["compare"] = compare(report.pop("fp8_out"), report.pop("bf16_dequantized_out"))
    print(json.dumps(report, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
