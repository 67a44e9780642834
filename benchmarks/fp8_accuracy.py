"""Block-FP8 judged as users judge a quantized checkpoint: the built-in trained model against its FP8 form.

    python -m benchmarks.fp8_accuracy [--device cpu|cuda] [--json OUT] [--mode auto|w8a16|w8a8] [--dir DIR]
                                      [--fp32-logits] [--prefill-mode w8a16|w8a8]

The built-in trained model (tiny DeepSeek-V3-shaped, trained on Python stdlib sources; what `dcpctl generate`
serves without --model-path) is quantized the way DeepSeek's releases are (128x128 blocks, e4m3, scale = amax
/ 448; fp8_model_check.write_trained) and compared with its bf16 form, on its shipped held-out text
(heldout.txt: 8 windows of 255 bytes of Python files it never saw). The model as trained is stored float32;
its bf16 form (fp8_model_check.write_trained(fp8=False): every tensor rounded to bf16) is the checkpoint a
bf16 release would hold, and the FP8 form keeps its tensors that are not FP8 (embeddings, lm_head, router,
norms) in bf16 too. Five paths:

| path     | weights                              | arithmetic                                               |
| -------- | ------------------------------------ | -------------------------------------------------------- |
| bf16     | as trained (rounded to bf16 at load) | bf16: the model a user would otherwise serve             |
| fp8      | block-FP8 kept                       | the served FP8 path: cuda, its Triton kernels; cpu, the  |
|          |                                      | methods in float64 on bf16 rows, rounded to bf16 per     |
|          |                                      | GEMM (fp8_model_check.emulated_fp8_matmul)               |
| f64      | as trained (float32)                 | float64: the exact reference (its bits per byte is the   |
|          |                                      | training record's)                                       |
| f64_bf16 | the bf16 form                        | float64: the bf16 checkpoint, exactly                    |
| f64_fp8  | the FP8 form, kept                   | float64: the methods on the FP8 checkpoint, exactly      |
|          |                                      | (w8a16: the dequantized weights; w8a8: rows quantized    |
|          |                                      | 1x128 e4m3 first)                                        |

Which pair the target judges (the report's `target_comparison`): on cuda the served paths, fp8 vs bf16 (the
FP8 kernels against the bf16 ones); on cpu, where no FP8 kernel runs, the two checkpoints in float64, f64_fp8
vs f64_bf16: the quantization alone (w8a8's activations' too), without bf16 arithmetic's rounding, which flips
greedy continuations by itself (f64 vs bf16). The other pairs are reported beside it.

--mode (fp8_parts.CHOICES, default auto: the runtime's runtime.fp8_gemm) is the FP8 paths' method. auto:
GEMMs of more than fp8_parts.PREFILL_ROWS rows (per expert when grouped: R // E, as fp8_gemm.fp8_matmul counts
them) quantize their activations 1x128 e4m3 (w8a8), those of up to that many keep them 16-bit (w8a16). On cuda
the served fp8 path runs the setting and its kernels decide per GEMM (fp8_tiles.method: the GPU's measured
table where it has the shape, else that rule); f64_fp8 follows the rule. On the CPU auto is emulated as
`--mode w8a16 --prefill-mode w8a8`, the rule without a measured table: the MoE passes run grouped
(mlp.runs_grouped), so a grouped GEMM's rows per expert are R // E, as the kernels count them (where a GPU's
table runs a pass's experts one by one instead, each is a dense GEMM of its own rows).

--prefill-mode (CPU; with auto only w8a8): the method of the GEMMs of more than PREFILL_ROWS rows (the
prefill's; decode steps of up to that many requests keep --mode); both FP8 paths (fp8, f64_fp8) follow it.
Under --mode w8a16 a pass of more than mlp.GROUPED_MAX_TOKENS tokens runs its experts one by one, each a dense
GEMM of its own rows.

--fp32-logits: the 16-bit paths' lm_head product is taken in fp32 (inputs as they are, fp32 output, as
SGLang's --enable-fp32-lm-head does; dcpctl's runtime rounds logits to the model dtype), so that logits a
rounding step apart no longer tie or swap in the greedy comparison.

Judged: bits per byte over all 8 x 255 held-out bytes (BOS in front of each window), the target pair's within
0.5% (`bits_per_byte.met`).

Reported, not judged:
- bits per byte of every path.
- the per-token KL divergence KL(P_ref || Q_path) at every held-out position bits per byte scores, from each
  path's logits (log_softmax in float64), in nats: mean, median, p99 and max, for the target pair and the
  other pairs (KL_PAIRS; bf16 vs f64, bf16 arithmetic's own, puts the figures in scale).
- greedy continuations (NEW_TOKENS each) of 32 held-out prompts (BOS + PROMPT_BYTES bytes from 32 evenly
  spaced distinct line starts), each path decoding freely: how many are equal per pair, and for each one that
  differs the first step that does and the reference's top-2 logit margin there (a near-tie flips under any
  perturbation, so agreement counts rounding as much as quantization).
- per-step logits of every path fed bf16's tokens, compared with a reference's only on the steps where both
  paths routed to the same experts: the norm-relative difference ||a - b|| / ||b||, median and max, over two
  filters: the step's own token routed alike in every MoE layer, and (stricter) its whole context did
  (fp8_model_check.routing_differs: another expert for an earlier token changes the attention context too).
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from benchmarks.fp8_model_check import (_load, _stats, emulated_fp8_matmul, norm_rel, recorded_routes,
                                        routing_differs, write_trained)
from dcpctl.launch.default_model import default_model
from dcpctl.runtime import settings
from dcpctl.runtime.kernels import fp8_gemm, fp8_parts
from dcpctl.runtime.tokenizer import ByteTokenizer
from tests.runtime.ref_context import RefContext, greedy_run

HERE = Path(__file__).resolve().parent

PROMPTS = 32
PROMPT_BYTES = 32
NEW_TOKENS = 16
BPB_TARGET = 0.005     # the target pair's bits per byte within 0.5%
TARGET_PAIR = {"cuda": ("fp8", "bf16"), "cpu": ("f64_fp8", "f64_bf16")}  # (path, reference) the target judges
GREEDY_PAIRS = (("fp8", "bf16"), ("f64_fp8", "f64_bf16"), ("f64", "bf16"), ("f64_bf16", "f64"),
                ("f64_fp8", "f64"))
STEP_PAIRS = (("fp8", "bf16"), ("f64_fp8", "f64_bf16"), ("f64", "bf16"), ("f64_fp8", "bf16"))
# (path, reference): KL(P_reference || Q_path); the f64 pairs take f64 as P, the exact distribution
KL_PAIRS = (("fp8", "bf16"), ("f64_fp8", "f64_bf16"), ("bf16", "f64"), ("f64_bf16", "f64"),
            ("f64_fp8", "f64"), ("f64_fp8", "bf16"))
PATHS = {
    "bf16": "the trained model in bf16 arithmetic (weights rounded to bf16 at load)",
    "fp8": {"cuda": "the served FP8 path: its Triton kernels",
            "cpu": "the served FP8 path's method emulated: float64 on bf16 rows, rounded to bf16 per GEMM"},
    "f64": "the trained model (float32 weights) in float64",
    "f64_bf16": "the bf16 form (every tensor rounded to bf16) in float64",
    "f64_fp8": "the block-FP8 form under the methods in float64 (emulated_fp8_matmul on float64 rows)",
}


def bits_per_byte(logits: list[torch.Tensor], ids: list[list[int]]) -> float:
    """Mean next-token loss in bits over every position after the first of each sequence (logits[i]: [len, V],
    row t predicting ids[i][t + 1]); one byte a token, so bits per token is bits per byte."""
    nats = [torch.nn.functional.cross_entropy(lg[:-1].double(), torch.tensor(s[1:]), reduction="sum")
            for lg, s in zip(logits, ids)]
    return float(sum(nats)) / sum(len(s) - 1 for s in ids) / math.log(2)


def kl_per_token(ref: list[torch.Tensor], path: list[torch.Tensor]) -> torch.Tensor:
    """KL(P_ref || Q_path) in nats at every position bits_per_byte scores (each sequence's rows but its last),
    from the two paths' logits, log_softmax in float64."""
    out = []
    for a, b in zip(ref, path):
        lp, lq = (torch.log_softmax(x[:-1].double(), -1) for x in (a, b))
        p = lp.exp()
        # a token P gives no probability adds nothing (and must not add 0 * inf)
        out.append(torch.where(p > 0, p * (lp - lq), 0.0).sum(-1))
    # float64 sums of terms that cancel can land a rounding step below 0 where P and Q agree
    return torch.cat(out).clamp(min=0.0)


def kl_stats(kl: torch.Tensor) -> dict:
    q = torch.quantile(kl, torch.tensor([0.5, 0.99], dtype=kl.dtype)).tolist()
    return {k: float(f"{v:.4g}") for k, v in (("mean", kl.mean().item()), ("median", q[0]), ("p99", q[1]),
                                               ("max", kl.max().item()))}


def heldout_windows() -> list[list[int]]:
    """BOS + each 255-byte window of the shipped held-out slice (training.json's `slice`)."""
    path = default_model().path
    record = json.loads((path / "training.json").read_text())["slice"]
    raw, seq = (path / record["file"]).read_bytes(), record["seq_bytes"]
    return [[ByteTokenizer.bos_token_id, *raw[i:i + seq]] for i in range(0, len(raw) - seq + 1, seq)]


def greedy_prompts() -> list[list[int]]:
    """BOS + PROMPT_BYTES bytes from PROMPTS line starts of heldout.txt: of the non-blank lines whose first
    PROMPT_BYTES bytes no earlier line shares (the file repeats itself), PROMPTS evenly spaced."""
    text = (default_model().path / "heldout.txt").read_bytes()
    starts = [0] + [i + 1 for i, b in enumerate(text) if b == ord("\n")]
    bodies = list(dict.fromkeys(text[a:a + PROMPT_BYTES] for a in starts
                                if a + PROMPT_BYTES <= len(text) and text[a] != ord("\n")))
    picks = [bodies[round(j * (len(bodies) - 1) / (PROMPTS - 1))] for j in range(PROMPTS)]
    return [[ByteTokenizer.bos_token_id, *body] for body in picks]


def on_same_experts(values: list[list[float]], rerouted: list[list[bool]]) -> list[float]:
    """values[prompt][step] kept where rerouted[prompt][step] is False (the whole context routed alike)."""
    return [v for vs, rs in zip(values, rerouted) for v, r in zip(vs, rs) if not r]


def token_routing_differs(a: list[torch.Tensor], b: list[torch.Tensor], lens: list[int],
                          steps: int) -> list[list[bool]]:
    """[prompt][step]: whether any MoE layer chose other experts for this step's own token (the prefill's last
    one at step 0); the calls as in fp8_model_check.routing_differs, which also counts the earlier tokens."""
    per = len(a) // (steps + 1)
    last = torch.tensor(lens).cumsum(0) - 1
    return [[any(not torch.equal(a[f * per + j][last[p] if f == 0 else p],
                                 b[f * per + j][last[p] if f == 0 else p])
                 for j in range(per)) for f in range(steps + 1)] for p in range(len(lens))]


def first_divergence(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y),
                None if len(a) == len(b) else min(len(a), len(b)))


def greedy_report(ids: list[list[int]], ref_ids: list[list[int]], ref_logits: list[torch.Tensor]) -> dict:
    """One path's free greedy ids against a reference path's; ref_logits[p]: its [NEW_TOKENS, V] along its own
    ids (the margin where they first differ)."""
    differ = []
    for p, (a, b) in enumerate(zip(ids, ref_ids)):
        step = first_divergence(a, b)
        if step is not None:
            top2 = ref_logits[p][step].topk(2).values
            differ.append({"prompt": p, "first_step": step,
                           "top2_margin": round(float(top2[0] - top2[1]), 4)})
    return {"equal": f"{len(ref_ids) - len(differ)}/{len(ref_ids)}", "differ": differ}


def _steps(pre: list[torch.Tensor], dec: list[torch.Tensor]) -> list[torch.Tensor]:
    # per prompt: [1 + steps, V] float64, the prefill's last position then each decode step
    return [torch.cat([p[-1:], d]).double().cpu() for p, d in zip(pre, dec)]


def run_path(m, name: str, windows, prompts, forced) -> dict:
    """One path's held-out logits, free greedy ids, and (fed `forced` ids) per-step logits with their
    routes."""
    ctx = RefContext(m.cfg.kv_lora_rank)
    ctx.set_batch([s for s, w in enumerate(windows) for _ in w], [i for w in windows for i in range(len(w))])
    flat = torch.tensor([t for w in windows for t in w])
    logits = m.logits(m.forward(flat, ctx.positions, ctx)).double().cpu()
    bounds = torch.tensor([0] + [len(w) for w in windows]).cumsum(0).tolist()
    out = {"heldout_logits": [logits[a:b] for a, b in zip(bounds, bounds[1:])]}
    out["bpb"] = bits_per_byte(out["heldout_logits"], windows)
    pre, dec, out["ids"] = greedy_run(m, prompts, NEW_TOKENS)
    out["free_logits"] = [lg[:NEW_TOKENS] for lg in _steps(pre, dec)]
    with recorded_routes() as routes:
        pre, dec, _ = greedy_run(m, prompts, NEW_TOKENS, forced=forced)
    out["forced"], out["routes"] = _steps(pre, dec), routes
    return out


def emulated_methods(mode: str, prefill_mode: str | None) -> tuple[str, str]:
    """(decode, prefill): the methods of GEMMs of up to and of more than PREFILL_ROWS rows that split_method
    runs; auto: fp8_tiles.method's rule where no measured table speaks (w8a16, then w8a8)."""
    if mode == "auto":
        return "w8a16", prefill_mode or "w8a8"
    return mode, prefill_mode or mode


def split_method(x, w8, scale, block, ends=None, decode="w8a16", prefill="w8a16", rows=None, **_):
    """emulated_fp8_matmul under `prefill` where the GEMM has more than PREFILL_ROWS rows (grouped: the MoE's
    rows per expert where it passes them, else R // E, as fp8_gemm.fp8_matmul counts them for
    fp8_tiles.method), else under `decode`."""
    rows = rows or (x.shape[0] if ends is None else max(1, x.shape[0] // w8.shape[0]))
    return emulated_fp8_matmul(x, w8, scale, block, ends,
                               mode=prefill if rows > fp8_parts.PREFILL_ROWS else decode)


def fp32_logits(m) -> None:
    """m.logits with the lm_head product in fp32 (one rank: no vocab gather)."""
    head = m.lm_head

    def logits(hidden: torch.Tensor) -> torch.Tensor:
        if hidden.is_cuda:
            return torch.mm(hidden.to(head.dtype), head.t(), out_dtype=torch.float32)
        return torch.nn.functional.linear(hidden.float(), head.float())
    m.logits = logits


def commit() -> str:
    r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True,
                       check=False)
    return r.stdout.strip() or "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--json", help="write the report here too")
    ap.add_argument("--mode", choices=fp8_parts.CHOICES, default="auto",
                    help="the FP8 paths' method (runtime.fp8_gemm; see above)")
    ap.add_argument("--prefill-mode", choices=fp8_parts.MODES,
                    help="CPU: the method of GEMMs of more than PREFILL_ROWS rows (default: --mode's; see "
                         "above)")
    ap.add_argument("--fp32-logits", action="store_true",
                    help="the 16-bit paths' lm_head product in fp32 (see above)")
    ap.add_argument("--dir", help="where the FP8 checkpoint is written, its bf16 form in DIR-bf16 "
                                  "(default: a temporary directory)")
    args = ap.parse_args()
    if refused := refusal(args):
        print(f"fp8_accuracy.py: {refused}", file=sys.stderr)
        return 2
    args.decode_mode, args.prefill_mode = emulated_methods(args.mode, args.prefill_mode)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("fp8_accuracy.py: no CUDA GPU here; --device cpu emulates the FP8 GEMM", file=sys.stderr)
        return 2
    settings.use(replace(settings.current(), fp8_gemm=args.mode))   # what the kernels' activation_mode reads
    t0, dev = time.perf_counter(), args.device
    root = Path(args.dir or tempfile.mkdtemp(prefix="dcpctl-trained-fp8-"))
    fp8_dir = write_trained(root, dev)
    bf16_dir = write_trained(root.with_name(root.name + "-bf16"), dev, fp8=False)
    windows, prompts = heldout_windows(), greedy_prompts()
    paths, forced = {}, None
    for name, d, keep, dtype in (("bf16", default_model().path, False, torch.bfloat16),
                                 ("f64", default_model().path, False, torch.float64),
                                 ("f64_bf16", bf16_dir, False, torch.float64),
                                 ("fp8", fp8_dir, True, torch.bfloat16),
                                 ("f64_fp8", fp8_dir, True, torch.float64)):
        m, _ = _load(d, keep, dtype, dev)
        if args.fp32_logits and dtype != torch.float64:
            fp32_logits(m)
        if name == "f64_fp8" or (keep and dev == "cpu"):   # quant.grouped_linear looks fp8_matmul up at every
                                                           # call
            fp8_gemm.fp8_matmul = functools.partial(split_method, decode=args.decode_mode,
                                                    prefill=args.prefill_mode)
        paths[name] = run_path(m, name, windows, prompts, forced)
        forced = forced or paths["bf16"]["ids"]
        print(f"{name}: {paths[name]['bpb']:.4f} bits/byte, {time.perf_counter() - t0:.0f} s",
              file=sys.stderr)
        del m
    print(json.dumps(report := build_report(paths, args, dev), indent=1))
    print(summary(report), file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0


def refusal(args: argparse.Namespace) -> str | None:
    """Why these options cannot run (None: they can): a prefill method apart from decode's is emulated on the
    CPU only (on cuda auto leaves it to the kernels), and auto's is w8a8."""
    if args.mode == "auto" and args.prefill_mode not in (None, "w8a8"):
        return "--mode auto quantizes the prefill's activations (w8a8); for another prefill method give " \
               "--mode w8a16|w8a8 --prefill-mode"
    if args.device == "cuda" and args.mode != "auto" and args.prefill_mode not in (None, args.mode):
        return "--prefill-mode other than --mode is emulated on the CPU only (--device cpu)"
    return None


def rel_bpb(paths: dict[str, dict], a: str, b: str) -> float:
    return (paths[a]["bpb"] - paths[b]["bpb"]) / paths[b]["bpb"]


def build_report(paths: dict[str, dict], args: argparse.Namespace, dev: str) -> dict:
    ta, tb = TARGET_PAIR[dev]
    target = f"{ta}_vs_{tb}"
    lens = [len(p) for p in greedy_prompts()]
    out: dict = {
        "command": " ".join(["python", "-m", "benchmarks.fp8_accuracy", *sys.argv[1:]]), "commit": commit(),
        "device": dev, "torch": torch.__version__, "mode": args.mode, "prefill_mode": args.prefill_mode,
        "methods": methods_note(args, dev),
        "fp32_logits": args.fp32_logits,
        "recorded_f64_bpb (training.json)": json.loads(
            (default_model().path / "training.json").read_text())["slice"]["bpb_float64"],
        "checkpoint": f"built-in trained model ({default_model().path.name}) and its block-FP8 form "
                      "(128x128 e4m3)",
        "paths": {k: v[dev] if isinstance(v, dict) else v for k, v in PATHS.items()},
        "target_comparison": {
            "pair": target,
            "why": "the served paths: the FP8 kernels against the bf16 ones" if dev == "cuda" else
                   "no FP8 kernel runs on the CPU: the FP8 checkpoint under the method against the bf16 "
                   "checkpoint, both in float64 (the quantization alone, without bf16 arithmetic's "
                   "rounding)"},
    }
    rels = {f"{a}_vs_{b}_rel": round(rel_bpb(paths, a, b), 5) for a,
            b in (("fp8", "bf16"), ("f64_fp8", "f64_bf16"))}
    out["bits_per_byte"] = {"heldout_bytes": sum(len(w) - 1 for w in heldout_windows()),
                            **{k: round(v["bpb"], 5) for k, v in paths.items()}, **rels,
                            "target": f"|{target}_rel| <= {BPB_TARGET}",
                            "met": abs(rel_bpb(paths, ta, tb)) <= BPB_TARGET}
    out["kl_per_token_nats"] = {
        "what": "KL(P_ref || Q_path) at every held-out position bits per byte scores, `path_vs_ref`",
        "positions": out["bits_per_byte"]["heldout_bytes"],
        **{f"{a}_vs_{b}": kl_stats(kl_per_token(paths[b]["heldout_logits"], paths[a]["heldout_logits"]))
           for a, b in KL_PAIRS}}
    greedy = {f"{a}_vs_{b}": greedy_report(paths[a]["ids"], paths[b]["ids"], paths[b]["free_logits"])
              for a, b in GREEDY_PAIRS}
    out["greedy"] = {"judged": f"no: reported ({PROMPTS} prompts x {NEW_TOKENS} tokens, each path free)",
                     **greedy}
    for scope, differs in (("this step's token", token_routing_differs),
                           ("the whole context", routing_differs)):
        per_step = {}
        for a, b in STEP_PAIRS:
            moved = differs(paths[a]["routes"], paths[b]["routes"], lens, NEW_TOKENS)
            err = [[norm_rel(x[s], y[s]) for s in range(y.shape[0])]
                   for x, y in zip(paths[a]["forced"], paths[b]["forced"])]
            same = on_same_experts(err, moved)
            per_step[f"{a}_vs_{b}"] = {"steps": f"{len(same)}/{sum(map(len, err))}",
                                       "norm_rel": _stats(same) if same else None}
        out[f"per_step_logits (all fed bf16's tokens), steps where {scope} "
            "routed to the same experts"] = per_step
    return out


def methods_note(args: argparse.Namespace, dev: str) -> str:
    bound = f"{fp8_parts.PREFILL_ROWS} rows (per expert when grouped)"
    emulated = f"up to {bound} {args.decode_mode}, more {args.prefill_mode}"
    if dev == "cuda" and args.mode == "auto":
        return f"fp8: the kernels' per GEMM (fp8_tiles.method); f64_fp8: {emulated}"
    return f"fp8 and f64_fp8: {emulated}" + (" (auto emulated)" if args.mode == "auto" else "")


def summary(report: dict) -> str:
    """The report's figures in a few lines (stderr, beside the JSON on stdout)."""
    bpb, kl = report["bits_per_byte"], report["kl_per_token_nats"]
    pair = report["target_comparison"]["pair"]
    lines = [f"methods: {report['methods']}",
             "bits/byte: " + ", ".join(f"{k} {bpb[k]:.5f}" for k in PATHS),
             f"target {pair}: rel {bpb[pair + '_rel']:+.5f} ({bpb['target']}): "
             f"{'met' if bpb['met'] else 'NOT met'}",
             f"KL(ref || path) per token, nats, over {kl['positions']} positions:"]
    lines += [f"  {k:<22} " + "  ".join(f"{s} {v:.3e}" for s, v in kl[k].items())
              for k in kl if isinstance(kl[k], dict)]
    greedy = {k: v for k, v in report["greedy"].items() if isinstance(v, dict)}
    lines.append("greedy equal (reported): " + ", ".join(f"{k} {v['equal']}" for k, v in greedy.items()))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
