"""The shipped trained tiny model (dcpctl/data/tiny-deepseek-stdlib, scripts/train_tiny.py).

Its weights load through the runtime and through Hugging Face, and both give the held-out loss
its training record states (float64, on the shipped 8-window slice: seconds); the record names the
corpus the script's rule selects; greedy text from "def " looks like Python.
"""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest
import torch

from dcpctl.launch.default_model import RECORD, default_model, describe
from dcpctl.runtime.models import load_model
from dcpctl.runtime.parallel import ParallelState
from dcpctl.runtime.tokenizer import load_tokenizer
from tests.runtime.ref_context import RefContext, greedy_run

ROOT = Path(__file__).resolve().parents[3]
MODEL = default_model().path
REL = 1e-4  # float64 on both sides: runtime and HF agree to ~1e-6 relative in logprob


@pytest.fixture(scope="module")
def record() -> dict:
    return json.loads((MODEL / RECORD).read_text())


@pytest.fixture(scope="module")
def slice_ids(record) -> torch.Tensor:
    """[windows, 1 + seq] token ids: BOS then each held-out window's bytes."""
    raw = (MODEL / record["slice"]["file"]).read_bytes()
    assert hashlib.sha256(raw).hexdigest() == record["slice"]["sha256"]
    n, seq = record["slice"]["windows"], record["slice"]["seq_bytes"]
    assert len(raw) == n * seq
    bos = load_tokenizer(MODEL).bos_token_id
    return torch.tensor([[bos, *raw[i * seq:(i + 1) * seq]] for i in range(n)])


def _bpb(logits: torch.Tensor, ids: torch.Tensor) -> float:
    # logits: [N, T, V] predicting ids[:, 1:] from ids[:, :-1]
    nats = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).double(), ids[:, 1:].flatten())
    return nats.item() / math.log(2)


def test_record_says_how_it_was_made(record):
    for key in ("script", "seed", "steps", "torch", "python", "final_train_bpb", "heldout_bpb",
                "description"):
        assert key in record, key
    assert (ROOT / record["script"]).is_file()
    assert f"{record['heldout_bpb']:.2f} bits/byte" in record["description"] == describe(MODEL)
    assert 0 < record["heldout_bpb"] < 8 and 0 < record["final_train_bpb"] < 8


def test_runtime_loss_on_the_heldout_slice_is_the_recorded_one(record, slice_ids):
    model = load_model(MODEL, ParallelState.single(), False, torch.float64, "cpu")
    logits = []
    for row in slice_ids:
        ctx = RefContext(model.cfg.kv_lora_rank)
        ctx.set_batch([0] * len(row), list(range(len(row))))
        logits.append(model.logits(model.forward(row, ctx.positions, ctx)))
    got = _bpb(torch.stack(logits), slice_ids)
    want = record["slice"]["bpb_float64"]
    assert abs(got - want) <= REL * want, f"runtime {got:.6f} bits/byte, record {want:.6f}"


def test_hf_loss_on_the_heldout_slice_is_the_recorded_one(record, slice_ids):
    pytest.importorskip("transformers")
    from tests.runtime.hf_oracle import load_hf
    with torch.no_grad():
        got = _bpb(load_hf(str(MODEL))(slice_ids).logits, slice_ids)
    want = record["slice"]["bpb_float64"]
    assert abs(got - want) <= REL * want, f"HF {got:.6f} bits/byte, record {want:.6f}"


def test_the_record_names_the_corpus_the_script_selects(record):
    from scripts import train_tiny
    files = record["corpus"]["files"]
    assert list(files) == train_tiny.CORPUS
    assert record["corpus"]["heldout_files"] == train_tiny.CORPUS[::train_tiny.HOLDOUT_EVERY]
    assert (record["slice"]["seq_bytes"] == train_tiny.SEQ
            and record["slice"]["windows"] == train_tiny.EVAL_SLICE)


def test_greedy_text_after_def_looks_like_python():
    model = load_model(MODEL, ParallelState.single(), False, torch.float64, "cpu")
    tok = load_tokenizer(MODEL)
    _, _, outs = greedy_run(model, [tok.encode("def ", add_bos=True)], 24)
    text = tok.decode(outs[0])
    assert text.isascii() and all(c.isprintable() or c in "\n\t" for c in text), repr(text)
    assert "(" in text and text.split("(")[0].isidentifier(), repr(text)  # "def name(..."


def test_launch_and_generate_say_what_the_default_model_is(record):
    import yaml
    from click.testing import CliRunner

    from dcpctl.cli.launch import _summary
    from dcpctl.cli.main import cli
    r = CliRunner().invoke(cli, ["launch", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert (f"model: {MODEL.name}: the built-in {record['description']}, as no --model-path was "
            "given" in r.stderr)
    cfg = yaml.safe_load(r.stdout.split("\n# node 0")[0])
    assert cfg["model"]["path"] == str(MODEL)
    assert _summary(cfg).startswith(f"{MODEL.name} ({record['description']}) on 2 cpu rank(s)")
