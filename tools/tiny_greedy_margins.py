"""Greedy ids of a tiny model under bf16 against float64, and why they flip: the top-2 logit gaps.

    python -m tools.tiny_greedy_margins [--model trained|random] [--device cuda] [-o margins.json]

--model trained (the default): the built-in model of `dcpctl launch/generate` (trained on Python
stdlib sources, dcpctl/data/tiny-deepseek-stdlib); its 32 prompts are BOS + 2..40 bytes of its
shipped held-out slice (heldout.txt) at seeded offsets.  --model random: the seeded random tiny
model (`ensure_tiny_model`) with the 32 random-byte prompts of tests/runtime/test_gpu_decode.py.
Seed 0, 8 new tokens each.  The reference is the bundled runtime in float64 on the CPU.  Along each
reference path (teacher-forced, Hugging Face DeepseekV3ForCausalLM as the oracle: it matches the
runtime to ~1e-12 in float64) the script records, per prompt, the smallest gap between the top two
float64 logits over the 8 steps, and the largest error bf16 makes in the winner's lead over its four
runners-up at those steps (HF in bf16 on the CPU: the size of bf16's own noise where it matters for
the argmax).
Then it runs the runtime's greedy generation in bf16 (and float32) on --device and counts, per
margin class, how many prompts reproduce the reference ids.  A prompt whose smallest gap is below
bf16's error on that lead is a coin flip for any bf16 implementation.
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import torch

from dcpctl.launch.default_model import default_model
from dcpctl.runtime.tiny import ensure_tiny_model
from dcpctl.runtime.tokenizer import ByteTokenizer
from dcpctl.runtime.worker import run_worker


def prompts(model: str, path: Path) -> list[list[int]]:
    rng = random.Random(0)
    if model == "random":   # exactly the GPU test's requests
        return [[rng.randrange(4, 256) for _ in range(rng.randrange(2, 40))] for _ in range(32)]
    text = (path / "heldout.txt").read_bytes()
    out = []
    for _ in range(32):
        n = rng.randrange(2, 40)
        at = rng.randrange(0, len(text) - n)
        out.append([ByteTokenizer.bos_token_id, *text[at:at + n]])
    return out


def requests(ids: list[list[int]]) -> list[dict]:
    return [{"prompt_ids": p, "max_new_tokens": 8, "temperature": 0, "ignore_eos": True} for p in ids]


def greedy(path: Path, device: str, dtype: str, reqs: list[dict]) -> list[list[int]]:
    from dcpctl.contract.launch_config import LaunchConfig
    from tests.runtime.engine.test_engine import launch_cfg
    cfg = launch_cfg(1, 1, capacity=4096, chunk=64)
    cfg["device"], cfg["model"]["dtype"], cfg["model"]["path"] = device, dtype, str(path)
    return [o["output_ids"] for o in run_worker(LaunchConfig.from_dict(cfg), reqs)["outputs"]]


def hf_logits(path: Path, dtype: torch.dtype, ids: list[int], n: int) -> torch.Tensor:
    # teacher-forced logits predicting the last n tokens of ids -> [n, V] float64
    from transformers import AutoModelForCausalLM
    model = hf_logits.cache.get(dtype)
    if model is None:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="sdpa",
                                                     experts_implementation="eager").eval()
        hf_logits.cache[dtype] = model
    with torch.no_grad():
        out = model(torch.tensor([ids])).logits[0].double()
    return out[len(ids) - n - 1:len(ids) - 1]


hf_logits.cache = {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["trained", "random"], default="trained",
                    help="the built-in trained model (default) or the seeded random tiny model")
    ap.add_argument("--device", default="cpu", help="where the runtime's bf16/fp32 greedy runs (cpu or cuda)")
    ap.add_argument("-o", "--output", type=Path)
    ap.add_argument("--no-margins", action="store_true",
                    help="only the id agreement counts (no Hugging Face oracle: for a machine without "
                         "transformers)")
    args = ap.parse_args()
    torch.manual_seed(0)
    path = default_model().path if args.model == "trained" else ensure_tiny_model()
    reqs = requests(prompts(args.model, path))
    ref = greedy(path, "cpu", "float64", reqs)
    runs = {f"{args.device}_bf16": greedy(path, args.device, "bfloat16", reqs),
            f"{args.device}_fp32": greedy(path, args.device, "float32", reqs)}
    if args.device != "cpu":
        runs["cpu_bf16"] = greedy(path, "cpu", "bfloat16", reqs)
    rows = []
    for i, (req, out) in enumerate(zip(reqs, ref)):
        if args.no_margins:
            rows.append({"prompt": i, "min_gap": float("nan"), "bf16_lead_err": float("nan"),
                         **{k: v[i] == out for k, v in runs.items()}})
            continue
        ids = req["prompt_ids"] + out
        f64 = hf_logits(path, torch.float64, ids, len(out))
        b16 = hf_logits(path, torch.bfloat16, ids, len(out))
        top = f64.topk(5, dim=-1).indices                              # [8, 5]: the winner and 4 runners-up
        lead64 = f64.gather(1, top[:, :1]) - f64.gather(1, top[:, 1:])  # [8, 4] winner's lead, float64
        lead16 = b16.gather(1, top[:, :1]) - b16.gather(1, top[:, 1:])  # the same leads in bf16
        gap = lead64[:, 0].min().item()
        err = (lead16 - lead64).abs().max().item()
        assert f64.argmax(-1).tolist() == out, f"prompt {i}: HF float64 disagrees with the runtime's path"
        rows.append({"prompt": i, "min_gap": gap, "bf16_lead_err": err,
                     **{k: v[i] == out for k, v in runs.items()}})
    safe = [r for r in rows if r["min_gap"] > r["bf16_lead_err"]]
    summary = {"model": args.model, "path": str(path), "prompts": len(rows), "tokens": 8,
               "margin_above_bf16_error": len(safe),
               **{k: {"all": sum(r[k] for r in rows), "margin_above_bf16_error": sum(r[k] for r in safe)}
                  for k in runs}}
    if args.device != "cpu":   # the device's bf16 ids against the CPU's bf16 ids (the same precision on both)
        same = [a == b for a, b in zip(runs[f"{args.device}_bf16"], runs["cpu_bf16"])]
        summary[f"{args.device}_bf16_vs_cpu_bf16"] = sum(same)
        for r, ok in zip(rows, same):
            r[f"{args.device}_bf16_vs_cpu_bf16"] = ok
    print("| prompt | min top-2 gap (fp64) | max bf16 error of the lead | " + " | ".join(runs) + " |")
    print("| ---: | ---: | ---: | " + " | ".join("---" for _ in runs) + " |")
    for r in sorted(rows, key=lambda r: r["min_gap"]):
        print(f"| {r['prompt']} | {r['min_gap']:.2e} | {r['bf16_lead_err']:.2e} | "
              + " | ".join("same" if r[k] else "differs" for k in runs) + " |")
    print(json.dumps(summary, indent=1))
    if args.output:
        args.output.write_text(json.dumps({"summary": summary, "rows": rows,
                                           "ids": {"cpu_float64": ref, **runs}},
                                          indent=1))


if __name__ == "__main__":
    main()
