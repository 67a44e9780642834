"""The peer for `dcpctl bench serve`: Hugging Face transformers `generate` on the same checkpoint.

    python3 -m benchmarks.hf_peer DIR [--device cuda] [--modes eager,compiled] [--cell 1000:1,8,32]
                                  [--cell 32768:1,8:1] [--output-len 64] [-o out.json]

DIR is a DeepseekV3 checkpoint (such as `dcpctl.runtime.tiny.write_tiny_model`'s), loaded with
AutoModelForCausalLM in --dtype, sdpa attention, transformers' default experts implementation. Each
--cell is INPUT_LEN:BATCHES[:REPS]: for each batch B, B prompts of INPUT_LEN random ids from [1, --vocab)
(seeded, as `bench serve` draws them) generate --output-len tokens greedily with EOS ignored.

Modes:
  eager     the default dynamic cache, nothing compiled
  compiled  cache_implementation="static": generate compiles the decode forward itself (transformers'
            CompileConfig defaults: inductor, mode reduce-overhead, i.e. CUDA graphs); a transformers
            without that auto-compile gets
            `model.forward = torch.compile(model.forward, mode="reduce-overhead")`.
            CUDA only (transformers compiles only on accelerators).

Timing: a streamer stamps the host clock when each step's tokens reach the host (generate copies them
and reads the stop flag every step, so the stamp is after the step finished). Per cell: one warm-up
generate (it compiles; its wall time is `warmup_s`), then REPS timed ones. prefill_ms = prompt in ->
first token out; decode_ms_per_token = (last token - first token) / (output_len - 1), the median over
reps; itl_ms = the percentiles of every gap between consecutive tokens over all reps (the same
definition as `bench serve`'s ITL). A cell that fails (out of memory, ...) records its error; the rest run.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from typing import Any

import torch

MODES = ("eager", "compiled")


class Stamps:
    """A transformers streamer that only records when each put() arrives (the first put is the prompt)."""

    def __init__(self) -> None:
        self.t: list[float] = []

    def put(self, value: Any) -> None:
        self.t.append(time.perf_counter())

    def end(self) -> None:
        pass


def load(path: str, dtype: torch.dtype, device: str) -> Any:
    """transformers' model for the checkpoint at `path`, on `device`, EOS ignored (as `ignore_eos`)."""
    import transformers
    cls = transformers.AutoModelForCausalLM
    try:
        model = cls.from_pretrained(path, dtype=dtype, attn_implementation="sdpa")
    except TypeError:  # transformers 4.x spells it torch_dtype
        model = cls.from_pretrained(path, torch_dtype=dtype, attn_implementation="sdpa")
    model = model.to(device).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def _pct(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)

    def at(q: float) -> float:
        return s[min(len(s) - 1, int(q * len(s)))]
    return {"mean": statistics.fmean(s), "p50": at(0.5), "p90": at(0.9)}


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _generate(model: Any, ids: torch.Tensor, n: int, mode: str) -> list[float]:
    # ids: [B, L] -> the host stamps of the prompt and of each of the n generated steps
    stamps = Stamps()
    kw: dict[str, Any] = {"cache_implementation": "static"} if mode == "compiled" else {}
    with torch.no_grad():
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                       streamer=stamps, **kw)
    return stamps.t


def _compile_fallback(model: Any) -> str:
    """How `compiled` compiles: generate's own auto-compile where it exists, else torch.compile(forward)."""
    if hasattr(model, "get_compiled_call"):
        return "generate's auto-compile with cache_implementation='static' (CompileConfig defaults)"
    model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
    return "model.forward = torch.compile(model.forward, mode='reduce-overhead', fullgraph=True)"


def time_cell(model: Any, mode: str, batch: int, input_len: int, output_len: int, reps: int, vocab: int,
              seed: int, device: str) -> dict[str, Any]:
    """One (mode, batch, input_len) cell: warm-up generate, then `reps` timed ones."""
    rng = random.Random(seed)
    ids = torch.tensor([[rng.randrange(1, vocab) for _ in range(input_len)] for _ in range(batch)],
                       device=device)
    _sync(device)
    t0 = time.perf_counter()
    _generate(model, ids, output_len, mode)
    warmup_s = time.perf_counter() - t0
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    prefill, per_token, gaps = [], [], []
    for _ in range(reps):
        t = _generate(model, ids, output_len, mode)
        if len(t) != output_len + 1:
            raise RuntimeError(f"expected {output_len + 1} streamer stamps, got {len(t)}")
        prefill.append(t[1] - t[0])
        per_token.append((t[-1] - t[1]) / max(1, output_len - 1))
        gaps += [b - a for a, b in zip(t[1:], t[2:])]

    def ms(xs: list[float]) -> list[float]:
        return [x * 1e3 for x in xs]
    row = {"mode": mode, "batch": batch, "input_len": input_len, "output_len": output_len, "reps": reps,
           "warmup_s": round(warmup_s, 2), "prefill_ms": statistics.median(ms(prefill)),
           "decode_ms_per_token": statistics.median(ms(per_token)), "itl_ms": _pct(ms(gaps))}
    if device.startswith("cuda"):
        row["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return row


def parse_cell(text: str) -> tuple[int, list[int], int | None]:
    """INPUT_LEN:B1,B2[:REPS] -> (input_len, batches, reps or None)."""
    parts = text.split(":")
    try:
        if len(parts) not in (2, 3):
            raise ValueError
        length, batches = int(parts[0]), [int(b) for b in parts[1].split(",")]
        reps = int(parts[2]) if len(parts) == 3 else None
        if length < 1 or not batches or min(batches) < 1 or (reps is not None and reps < 1):
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError("must look like 1000:1,8,32 or 32768:1,8:1 (positive), got "
                                         f"{text!r}") from None
    return length, batches, reps


def run(args: argparse.Namespace) -> dict[str, Any]:
    import transformers
    dtype = getattr(torch, args.dtype)
    t0 = time.perf_counter()
    model = load(args.model, dtype, args.device)
    doc: dict[str, Any] = {"model": args.model, "device": args.device, "dtype": args.dtype,
                           "transformers": transformers.__version__, "torch": torch.__version__,
                           "load_s": round(time.perf_counter() - t0, 2), "output_len": args.output_len,
                           "experts_implementation": getattr(model.config, "_experts_implementation", None),
                           "rows": []}
    if args.device.startswith("cuda"):
        doc["gpu"] = torch.cuda.get_device_name()
    for length, batches, reps in args.cell:   # cells outer: the short prompts' figures come first
        for mode in args.modes:
            if mode == "compiled" and not args.device.startswith("cuda"):
                doc["rows"].append({"mode": mode, "input_len": length,
                                    "skipped": "transformers compiles generate only on accelerators"})
                continue
            if mode == "compiled" and "compile" not in doc:
                doc["compile"] = _compile_fallback(model)
            for b in batches:
                try:
                    row = time_cell(model, mode, b, length, args.output_len, reps or args.reps, args.vocab,
                                    args.seed, args.device)
                except Exception as e:  # noqa: BLE001 - one cell's failure (often OOM) is a result too
                    row = {"mode": mode, "batch": b, "input_len": length,
                           "error": f"{type(e).__name__}: {str(e)[:300]}"}
                    if args.device.startswith("cuda"):
                        torch.cuda.empty_cache()
                doc["rows"].append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
                save(doc, args.output)   # after every row: a run cut short by its caller still leaves its
                                         # figures
    return doc


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("model", help="checkpoint directory (config.json + safetensors)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32", "float64"])
    ap.add_argument("--modes", default="compiled,eager", type=lambda s: s.split(","))
    ap.add_argument("--cell", action="append", type=parse_cell, help="INPUT_LEN:BATCHES[:REPS] (repeatable)")
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--vocab", type=int, default=256, help="prompt ids from [1, vocab), as bench serve")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-o", "--output", help="write the JSON here (it is always printed)")
    args = ap.parse_args(argv)
    bad = [m for m in args.modes if m not in MODES]
    if bad or args.output_len < 2 or args.reps < 1:
        ap.error(f"--modes from {list(MODES)}, --output-len >= 2, --reps >= 1 (got {args.modes}, "
                 f"{args.output_len}, {args.reps})")
    args.cell = args.cell or [parse_cell("1000:1,8,32")]
    doc = run(args)
    save(doc, args.output)
    print(json.dumps(doc, indent=2))


def save(doc: dict[str, Any], path: str | None) -> None:
    """The JSON document at `path` (nothing without one), whole each time: a reader never sees half."""
    if path:
        with open(path + ".tmp", "w") as f:
            f.write(json.dumps(doc, indent=2))
        os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
