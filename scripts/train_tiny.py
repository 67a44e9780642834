"""Train the built-in default model: a tiny DeepSeek-V3-shaped byte-level LM on Python stdlib sources.

    nice python -m scripts.train_tiny [-o dcpctl/data/tiny-deepseek-stdlib] [--steps N] [--seed 0]

Corpus: the CORPUS files below (a fixed list; each exists in CPython 3.10, 3.11 and 3.12), read from the
running interpreter's standard library (`sysconfig.get_paths()["stdlib"]`), so the bytes depend on the Python
version only (the record names it and each file's sha256).  Every HOLDOUT_EVERY-th file of the sorted list is
held out; the rest, joined by blank lines, is the training stream. Training samples are windows of SEQ bytes
that start at a line start, with BOS in front (as `dcpctl generate` encodes a prompt), drawn from a
torch.Generator seeded with --seed; the model is Hugging Face's DeepseekV3ForCausalLM (MLA with q LoRA, YaRN
rope, one dense layer then MoE layers with routed + shared experts, routed by noaux_tc whose correction bias
is updated by DeepSeek-V3's aux-loss-free balancing rule). Deterministic for one seed, torch version, thread
count and Python version.

Writes the output directory as `save_pretrained` does (config.json, model.safetensors) plus the byte
tokenizer, heldout.txt (the first EVAL_SLICE windows of the held-out files, the slice the test
evaluates) and training.json, the record: script, corpus, seed, steps, losses in bits per byte.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import sys
import sysconfig
import time
from pathlib import Path

import torch

from dcpctl.runtime.tiny import tiny_config
from dcpctl.runtime.tokenizer import ByteTokenizer

CORPUS = sorted("""
abc.py argparse.py ast.py base64.py bdb.py bisect.py calendar.py cmd.py code.py codecs.py colorsys.py
configparser.py contextlib.py copy.py csv.py dataclasses.py datetime.py difflib.py dis.py enum.py filecmp.py
fileinput.py fnmatch.py fractions.py ftplib.py functools.py getopt.py gettext.py glob.py graphlib.py gzip.py
hashlib.py heapq.py hmac.py inspect.py ipaddress.py keyword.py linecache.py locale.py mimetypes.py netrc.py
numbers.py operator.py optparse.py os.py pathlib.py pickle.py platform.py posixpath.py pprint.py queue.py
quopri.py random.py reprlib.py runpy.py sched.py secrets.py selectors.py shelve.py shlex.py shutil.py
signal.py smtplib.py socket.py socketserver.py statistics.py string.py subprocess.py tarfile.py tempfile.py
textwrap.py threading.py timeit.py token.py tokenize.py trace.py traceback.py types.py typing.py uuid.py
warnings.py wave.py weakref.py webbrowser.py zipapp.py collections/__init__.py json/__init__.py
json/decoder.py json/encoder.py json/scanner.py logging/__init__.py logging/handlers.py logging/config.py
http/client.py http/server.py http/cookies.py urllib/parse.py urllib/request.py html/parser.py
unittest/case.py concurrent/futures/_base.py concurrent/futures/thread.py email/message.py email/utils.py
""".split())
HOLDOUT_EVERY = 13      # files 0, 13, 26, ... of CORPUS are held out
SEQ = 255               # bytes per window; with BOS the model sees 256 positions
EVAL_SLICE = 8          # held-out windows shipped in heldout.txt and evaluated by the test
THREADS = 2

# hidden 128, 3 layers (1 dense + 2 MoE with 8 routed experts, top-2 in 1 of 2 groups, 1 shared),
# 8 heads, q LoRA 64, latent KV 64 + rope 16, YaRN x4 over 512 positions
SHAPE = dict(hidden_size=128, intermediate_size=384, moe_intermediate_size=64, num_hidden_layers=3,
             num_attention_heads=8, num_key_value_heads=8, q_lora_rank=64, kv_lora_rank=64,
             qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16, initializer_range=0.02)


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def corpus_files(stdlib: Path) -> list[tuple[str, bytes]]:
    missing = [f for f in CORPUS if not (stdlib / f).is_file()]
    if missing:
        raise SystemExit(f"{stdlib} lacks {missing}: run this script with CPython 3.10-3.12")
    return [(f, (stdlib / f).read_bytes()) for f in CORPUS]


def split(files: list[tuple[str, bytes]]) -> tuple[bytes, list[bytes]]:
    train = b"\n\n".join(b for i, (_, b) in enumerate(files) if i % HOLDOUT_EVERY)
    return train, [b for i, (_, b) in enumerate(files) if i % HOLDOUT_EVERY == 0]


def eval_windows(held: list[bytes]) -> list[bytes]:
    """Non-overlapping SEQ-byte windows of each held-out file, in order (a file's short tail dropped)."""
    return [b[i:i + SEQ] for b in held for i in range(0, len(b) - SEQ + 1, SEQ)]


def line_starts(data: torch.Tensor) -> torch.Tensor:
    """Offsets just after each newline (and 0) with a whole window after them: BOS then means "a line
    begins", as in a prompt such as "def " (random offsets taught it "anywhere, mid-word")."""
    after = torch.cat([torch.zeros(1, dtype=torch.int64), (data == ord("\n")).nonzero().flatten() + 1])
    return after[after <= len(data) - SEQ]


def batch_of(windows: list[bytes]) -> torch.Tensor:
    bos = ByteTokenizer.bos_token_id
    return torch.tensor([[bos, *w] for w in windows], dtype=torch.int64)


def bits_per_byte(model: torch.nn.Module, ids: torch.Tensor) -> float:
    """Mean next-byte loss over every position after BOS, in bits."""
    logits = model(ids).logits[:, :-1].double()
    nats = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
    return nats.item() / math.log(2)


@torch.no_grad()
def evaluate(model: torch.nn.Module, windows: list[bytes], batch: int = 32) -> float:
    model.eval()
    total = sum(bits_per_byte(model, batch_of(windows[i:i + batch])) * len(windows[i:i + batch])
                for i in range(0, len(windows), batch))
    model.train()
    return total / len(windows)


class Balancer:
    """DeepSeek-V3's aux-loss-free balancing: after each step, bias += rate * sign(mean load - load)."""

    def __init__(self, model: torch.nn.Module, rate: float):
        from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter
        self.rate, self.loads = rate, {}
        self.gates = [m for m in model.modules() if isinstance(m, DeepseekV3TopkRouter)]
        for g in self.gates:
            g.register_forward_hook(self._count)

    def _count(self, gate: torch.nn.Module, _inp: object, out: tuple) -> None:
        counts = torch.bincount(out[2].flatten(), minlength=gate.num_experts).double()
        self.loads[gate] = self.loads.get(gate, 0) + counts

    def step(self) -> float:
        """Update every gate's bias; return the worst max/mean expert load of this step."""
        worst = 0.0
        with torch.no_grad():
            for g in self.gates:
                load = self.loads.pop(g)
                g.e_score_correction_bias += self.rate * torch.sign(load.mean() - load).float()
                worst = max(worst, (load.max() / load.mean()).item())
        return worst


def lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def build_model(seed: int) -> torch.nn.Module:
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    cfg = tiny_config(**SHAPE)
    cfg.pop("architectures"), cfg.pop("model_type"), cfg.pop("torch_dtype")
    torch.manual_seed(seed)
    model = DeepseekV3ForCausalLM(DeepseekV3Config(**cfg))
    model.config.architectures = ["DeepseekV3ForCausalLM"]
    return model


def train(args: argparse.Namespace) -> dict:
    torch.set_num_threads(THREADS)
    stdlib = stdlib_dir()
    files = corpus_files(stdlib)
    stream, held = split(files)
    windows = eval_windows(held)
    model = build_model(args.seed)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    balancer = Balancer(model, rate=1e-3)
    g = torch.Generator().manual_seed(args.seed)
    data = torch.frombuffer(bytearray(stream), dtype=torch.uint8).long()
    starts = line_starts(data)
    bos = torch.full((args.batch, 1), ByteTokenizer.bos_token_id, dtype=torch.int64)
    log, start, loss_avg = [], time.monotonic(), None
    model.train()
    for step in range(args.steps):
        offsets = starts[torch.randint(0, len(starts), (args.batch,), generator=g)]
        ids = torch.cat([bos, data[offsets[:, None] + torch.arange(SEQ)]], dim=1)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args.steps, args.lr, args.warmup)
        loss = model(ids, labels=ids).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        imbalance = balancer.step()
        bpb = loss.item() / math.log(2)
        loss_avg = bpb if loss_avg is None else 0.98 * loss_avg + 0.02 * bpb
        if step % 50 == 0 or step in (10, args.steps - 1):
            log.append({"step": step, "train_bpb": round(bpb, 4),
                        "max_over_mean_expert_load": round(imbalance, 3)})
            print(f"step {step:5d}  train {bpb:.3f} bpb (avg {loss_avg:.3f})  expert load max/mean "
                  f"{imbalance:.2f}  {time.monotonic() - start:.0f}s", flush=True)
    train_s = time.monotonic() - start
    model.eval()
    return {"model": model, "files": files, "stdlib": stdlib, "windows": windows, "log": log,
            "train_s": train_s, "final_train_bpb": loss_avg}


def save(out: Path, args: argparse.Namespace, r: dict) -> dict:
    model = r["model"]
    heldout_bpb = evaluate(model, r["windows"])
    slice_windows = r["windows"][:EVAL_SLICE]
    model.save_pretrained(str(out))
    ByteTokenizer().save(out)
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": ByteTokenizer.bos_token_id, "eos_token_id": ByteTokenizer.eos_token_id}, indent=2))
    (out / "heldout.txt").write_bytes(b"".join(slice_windows))
    from transformers import AutoModelForCausalLM  # the saved directory, read back as the test reads it
    try:
        model64 = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float64,
                                                       experts_implementation="eager")
    except TypeError:  # transformers without experts_implementation
        model64 = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float64)
    with torch.no_grad():
        slice_bpb = bits_per_byte(model64.eval(), batch_of(slice_windows))
    record = {
        "description": f"tiny DeepSeek-V3-shaped model trained on Python stdlib sources, "
                       f"{heldout_bpb:.2f} bits/byte held out",
        "script": "scripts/train_tiny.py", "command": " ".join(["python", "-m", "scripts.train_tiny",
                                                                *sys.argv[1:]]),
        "seed": args.seed, "steps": args.steps, "batch": args.batch, "seq_bytes": SEQ, "peak_lr": args.lr,
        "warmup": args.warmup, "threads": THREADS, "train_seconds": round(r["train_s"], 1),
        "torch": torch.__version__, "transformers": __import__("transformers").__version__,
        "python": platform.python_version(), "machine": platform.machine(), "cpu": _cpu_name(),
        "corpus": {"source": "CPython standard library sources (sysconfig stdlib dir) of the python above",
                   "rule": f"the fixed sorted list `files`; every {HOLDOUT_EVERY}th (index 0, "
                           f"{HOLDOUT_EVERY}, ...) is held out; training windows are {SEQ} bytes from a "
                           "random line start of the other files joined by blank lines, BOS in front",
                   "files": {f: hashlib.sha256(b).hexdigest() for f, b in r["files"]},
                   "heldout_files": [f for i, (f, _) in enumerate(r["files"]) if i % HOLDOUT_EVERY == 0],
                   "train_bytes": sum(len(b) for i, (_, b) in enumerate(r["files"]) if i % HOLDOUT_EVERY)},
        "final_train_bpb": round(r["final_train_bpb"], 4),
        "heldout_bpb": round(heldout_bpb, 4), "heldout_windows": len(r["windows"]),
        "slice": {"file": "heldout.txt", "windows": EVAL_SLICE, "seq_bytes": SEQ,
                  "sha256": hashlib.sha256((out / "heldout.txt").read_bytes()).hexdigest(),
                  "bpb_float64": slice_bpb,
                  "rule": f"the first {EVAL_SLICE} held-out windows: each file's non-overlapping {SEQ}-byte "
                          "windows in order, files in list order"},
        "log": r["log"],
    }
    (out / "training.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def _cpu_name() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", type=Path, default=Path("dcpctl/data/tiny-deepseek-stdlib"))
    ap.add_argument("--steps", type=int, default=814, help="the shipped checkpoint: 814")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    record = save(args.output, args, train(args))
    print(json.dumps({k: record[k] for k in ("description", "final_train_bpb", "heldout_bpb",
                                             "train_seconds")}))


if __name__ == "__main__":
    main()
