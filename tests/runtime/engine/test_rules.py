"""Per-request logit rules (engine/rules.py) and structured output (runtime/grammar.py) on the built-in
checkpoint: each rule alone on a logits row, a grammar driven over random logits, and the tiny model under DCP
2 producing exactly the DCP 1 tokens with every rule on (the rules act on the logits every rank samples from,
never on attention)."""
import json
import re

import pytest
import torch

from dcpctl.launch.default_model import default_model
from dcpctl.runtime import grammar
from dcpctl.runtime.engine.request import SamplingParams, Sequence
from dcpctl.runtime.engine.rules import LogitRules, bitmask_to_bool
from dcpctl.runtime.engine.sample import Sampler, greedy_all
from dcpctl.runtime.sampling import filter_logits
from dcpctl.runtime.worker import run_worker
from tests.dist import run_ranks
from tests.runtime.configs import config
from tests.runtime.engine.test_engine import launch_cfg

MODEL = str(default_model().path)
EOS = 257
V = 260
COMPACT = grammar.json_options(disable_any_whitespace=True)   # a bounded schema then has a bounded length
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                           "n": {"type": "integer", "minimum": 0, "maximum": 99},
                                           "ok": {"type": "boolean"}},
          "required": ["name", "n", "ok"], "additionalProperties": False}


def _seq(rid=0, output=(), **params):
    return Sequence(rid, [256, 1], SamplingParams(**params), output=list(output))


def test_bitmask_expands_bit_j_of_word_i_to_id_32i_plus_j():
    words = torch.tensor([1 - 2**31, 1 << 3], dtype=torch.int32)     # bits 0 and 31, bit 3: ids 0, 31, 35
    got = bitmask_to_bool(words, 40, torch.device("cpu"))
    assert got.nonzero().view(-1).tolist() == [0, 31, 35]
    # past 64: off
    assert bitmask_to_bool(words, 70, torch.device("cpu")).nonzero().view(-1).tolist() == [0, 31, 35]


def test_bias_allowed_ids_and_min_tokens_each_change_only_their_ids():
    rules, row = LogitRules({EOS}, MODEL), torch.zeros(1, V)
    x = rules.apply(row, _seq(logit_bias=((5, 2.5), (7, -100.0))))
    assert x[0, 5] == 2.5 and x[0, 7] == -100.0 and (x[0, :5] == 0).all() and row.abs().sum() == 0  # a copy
    x = rules.apply(row, _seq(allowed_token_ids=(3, 4)))
    assert torch.isfinite(x[0]).nonzero().view(-1).tolist() == [3, 4]
    x = rules.apply(row, _seq(min_tokens=2, stop_token_ids=(10,), output=[1]))
    assert torch.isinf(x[0]).nonzero().view(-1).tolist() == [10, EOS]
    assert torch.isfinite(rules.apply(row, _seq(min_tokens=2, output=[1, 2]))).all()   # reached: no mask


def test_min_p_keeps_tokens_within_the_ratio_of_the_best():
    p = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    x = filter_logits(p.log(), 1.0, min_p=0.25)
    assert torch.isfinite(x[0]).tolist() == [True, True, True, False]     # 0.05 < 0.25 * 0.5


def _drive(params, steps=60, seed=0):
    """Sample `steps` tokens from random logits under `params`; the text up to EOS."""
    sampler, seq = Sampler({EOS}, MODEL), _seq(**params)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        tok = sampler(torch.randn(1, V, generator=gen) * 3, [seq])[0][0]
        if tok == EOS:
            break
        seq.output.append(tok)
    return bytes(seq.output).decode("utf-8", "replace"), tok == EOS


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_random_logits_under_a_grammar_give_its_language(temperature):
    rx = r"[a-c]{2,4}-(yes|no)"
    text, ended = _drive({"grammar": grammar.regex(rx), "temperature": temperature, "seed": 3})
    assert ended and re.fullmatch(rx, text), text
    text, ended = _drive({"grammar": grammar.json_schema(SCHEMA, COMPACT), "temperature": temperature,
                          "seed": 4}, 200)
    doc = json.loads(text)
    assert ended and set(doc) == {"name", "n", "ok"} and 0 <= doc["n"] <= 99 and len(doc["name"]) <= 6, text
    text, ended = _drive({"grammar": grammar.choice(["red", "green", "blue"]), "temperature": temperature})
    assert ended and text in ("red", "green", "blue")


def test_ebnf_and_compile_errors():
    text, ended = _drive({"grammar": grammar.ebnf('root ::= "x" [0-9]+ "!"'), "seed": 1}, 40)
    assert ended and re.fullmatch(r"x[0-9]+!", text), text
    tok = grammar.GrammarTokenizer(MODEL, [EOS], V)
    assert "unclosed character class" in tok.check(grammar.regex("[0-9"))
    with pytest.raises(grammar.GrammarError, match="not valid JSON"):
        grammar.json_schema("{not json")
    assert grammar.closed({"type": "object", "properties": {"a": {"type": "object"}}}) == {
        "type": "object", "properties": {"a": {"type": "object", "additionalProperties": False}},
        "additionalProperties": False}


def test_a_request_with_rules_never_samples_on_the_pipeline():
    assert greedy_all([_seq()]) and greedy_all([_seq(stop_token_ids=(4,), min_p=0.3)])
    for rule in ({"min_tokens": 1}, {"logit_bias": ((1, 1.0),)}, {"allowed_token_ids": (1,)},
                 {"grammar": "g"}):
        assert not greedy_all([_seq(**rule)]), rule


RULED = [  # greedy and sampled, every rule, on the trained model
    {"prompt_ids": [256, *b"def "], "max_new_tokens": 24, "grammar": grammar.regex(r"[a-z_]{1,8}\([a-z]*\)"),
     "logprobs": True},
    {"prompt_ids": [256, *b"x = "], "max_new_tokens": 60, "grammar": grammar.json_schema(SCHEMA, COMPACT),
     "temperature": 0.8, "seed": 9, "logprobs": True},
    {"prompt_ids": [256, *b"import "], "max_new_tokens": 6, "min_tokens": 4, "logit_bias": {"111": 3.0},
     "allowed_token_ids": list(range(97, 123)) + [EOS], "stop_token_ids": [115]},
]


def _run(rank, world, cfg):
    return run_worker(config(cfg), RULED)


def _cfg(world, dcp):
    cfg = launch_cfg(world, dcp, capacity=128, chunk=6)
    cfg["model"]["path"] = MODEL
    return cfg


def test_rules_under_dcp_give_the_dcp1_tokens():
    want = run_ranks(_run, 1, _cfg(1, 1))[0]["outputs"]
    got = run_ranks(_run, 2, _cfg(2, 2))[0]["outputs"]
    for w, g in zip(want, got):
        assert g["output_ids"] == w["output_ids"]
        assert g["output_logprobs"] == pytest.approx(w["output_logprobs"], abs=1e-9)
    call = bytes(t for t in want[0]["output_ids"] if t != EOS).decode()
    assert re.fullmatch(r"[a-z_]{1,8}\([a-z]*\)", call), call
    doc = json.loads(bytes(t for t in want[1]["output_ids"] if t != EOS).decode())
    assert set(doc) == {"name", "n", "ok"}
    third = want[2]["output_ids"]
    assert all(97 <= t <= 122 or t == EOS for t in third) and len(third) >= 5 and 115 not in third[:4]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_rules_mask_cuda_logits_as_cpu_ones():
    """The same rules on CUDA bf16 logits: the mask built on the host lands on the device, choices agree."""
    gen = torch.Generator().manual_seed(0)
    rx = grammar.regex(r"[a-c]{3}")
    for params in ({"grammar": rx}, {"grammar": rx, "temperature": 1.0, "seed": 2},
                   {"allowed_token_ids": (98,)}, {"min_tokens": 2, "logit_bias": ((EOS, 50.0),)}):
        cpu, gpu = Sampler({EOS}, MODEL), Sampler({EOS}, MODEL)
        a, b = _seq(**params), _seq(**params)
        for _ in range(3):
            logits = (torch.randn(1, V, generator=gen) * 3).bfloat16()
            ta, tb = cpu(logits, [a])[0][0], gpu(logits.cuda(), [b])[0][0]
            assert ta == tb, params
            a.output.append(ta)
            b.output.append(tb)


def test_a_request_reads_its_whitespace_options_as_the_server_reads_its_flags():
    # structured_outputs' disable_any_whitespace and whitespace_pattern go through grammar.json_options, the
    # rule the server's --constrained-json-* flags use: no whitespace wins over a pattern; none: the server's
    from dcpctl.runtime import grammar as g
    from dcpctl.runtime.server.structured import _structured_outputs
    server = g.json_options(max_whitespace_cnt=2)
    both = {"json": {"type": "object"}, "disable_any_whitespace": True, "whitespace_pattern": "[ ]{0,1}"}
    assert _structured_outputs(both, "structured_outputs", server) == g.json_schema(
        {"type": "object"}, g.json_options(True, "[ ]{0,1}"))
    assert _structured_outputs({"json": {"type": "object"}}, "structured_outputs", server) == g.json_schema(
        {"type": "object"}, server)
