"""Speculative decoding (STANDALONE) on the tiny checkpoint: every layout equals plain DCP 1 decoding.

Drafts: the target itself (greedy acceptance 100%), the target with 5% weight noise (partial
acceptance: both KV caches roll back mid-run), and a smaller different-seed model (mostly rejected).
"""
import json
import shutil

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from dcpctl.plan.memory import kv_row_bytes
from dcpctl.plan.model import spec_from_path
from dcpctl.runtime.engine import Engine, SamplingParams
from dcpctl.contract.fields import LaunchConfigError
from dcpctl.runtime.models import load_model
from dcpctl.runtime.boot import build_state
from tests.dist import run_ranks
from tests.runtime.configs import config
from tests.runtime.engine.test_engine import _expected_rows, launch_cfg

tiny = pytest.importorskip("dcpctl.runtime.tiny")

REQUESTS = [  # shorter than every DCP size, longer than a prefill chunk (6), sampled; lengths cut K + 1 runs
    {"prompt_ids": [3], "max_new_tokens": 7, "logprobs": True},
    {"prompt_ids": [11, 2, 7, 30, 4], "max_new_tokens": 9, "logprobs": True},
    {"prompt_ids": [5, 9, 14, 2, 8, 40, 6, 1, 17, 22, 3, 9, 12], "max_new_tokens": 5, "logprobs": True},
    {"prompt_ids": [21, 4, 8], "max_new_tokens": 6, "temperature": 0.7, "top_k": 20, "top_p": 0.9, "seed": 5,
     "logprobs": True},
]


@pytest.fixture(scope="module")
def drafts(tmp_path_factory):
    target = tiny.ensure_tiny_model()
    near = tmp_path_factory.mktemp("near")
    shutil.copytree(target, near, dirs_exist_ok=True)
    g = torch.Generator().manual_seed(1)
    t = load_file(str(near / "model.safetensors"))
    t = {k: v + 0.05 * v.std() * torch.randn(v.shape, generator=g) if v.dim() > 1 else v
         for k, v in sorted(t.items())}
    save_file(t, str(near / "model.safetensors"), metadata={"format": "pt"})
    small = tiny.write_tiny_model(tmp_path_factory.mktemp("small"), seed=7, num_hidden_layers=2,
                                  kv_lora_rank=16)
    return {"self": str(target), "near": str(near), "small": str(small)}


def _cfg(world, dcp, dp=1, backend="ag_rs", rep_q=False, page=2, draft=None, k=3):
    cfg = launch_cfg(world, dcp, dp, backend, rep_q, capacity=96, chunk=6)
    cfg["model"]["path"] = str(tiny.ensure_tiny_model())
    cfg["kv"]["page_size"] = page
    if draft:
        cfg["speculative"] = {"algorithm": "STANDALONE", "draft_model_path": draft, "num_draft_tokens": k}
    return cfg


def _engine(cfg, eos=None):
    typed_cfg = config(cfg, eos)
    ps = build_state(typed_cfg)
    model = load_model(cfg["model"]["path"], ps, cfg["decisions"]["dcp_replicate_q_proj"], torch.float64)
    return Engine(model, ps, typed_cfg)


def _run(rank, world, cfg, requests, eos=None):
    eng = _engine(cfg, eos)
    out = eng.generate(requests)
    eng.check_drained()
    out["retractions"] = eng.sched.retractions
    if eng.spec:
        eng.spec.alloc.check_integrity()
        assert eng.spec.alloc.free_pages == eng.spec.alloc.num_pages and not eng.spec.alloc.requests()
        out["memory"] = {"virtual": eng.alloc.virtual_capacity, "target_bytes": eng.pool.kv.nbytes,
                         "draft_bytes": eng.spec.pool.kv.nbytes, "draft_row": eng.spec.pool.nbytes_per_row(),
                         "draft_capacity": eng.spec.pool.capacity}
    return out


def _same(got, want):
    for w, o in zip(want["outputs"], got["outputs"]):
        assert o["output_ids"] == w["output_ids"]
        assert o["output_logprobs"] == pytest.approx(w["output_logprobs"], abs=1e-9)


@pytest.fixture(scope="module")
def reference():
    return run_ranks(_run, 1, _cfg(1, 1, page=1), REQUESTS)[0]


CASES = [  # (world, dcp, attn_dp, backend, replicated q, page size, draft, K)
    (1, 1, 1, "ag_rs", False, 2, "near", 3),
    (2, 2, 1, "ag_rs", False, 4, "near", 3),
    (2, 2, 1, "a2a", True, 2, "small", 2),
    (4, 4, 1, "a2a", False, 4, "near", 4),
    (4, 4, 1, "ag_rs", True, 2, "self", 3),
    (4, 2, 2, "a2a", False, 2, "near", 2),    # attention DP: two replicas of DCP 2
]


@pytest.mark.parametrize("world,dcp,dp,backend,rep_q,page,draft,k", CASES)
def test_spec_matches_plain(reference, drafts, world, dcp, dp, backend, rep_q, page, draft, k):
    results = run_ranks(_run, world, _cfg(world, dcp, dp, backend, rep_q, page, drafts[draft], k), REQUESTS)
    got = results[0]
    _same(got, reference)
    assert got["stats"]["kv_rows_per_rank"] == _expected_rows(got["outputs"], world, dcp, dp)
    spec = got["stats"]["spec"]
    assert (spec["draft_tokens_proposed"] > 0
            and 0 <= spec["draft_tokens_accepted"] <= spec["draft_tokens_proposed"])
    assert spec["draft_tokens_proposed"] % k == 0
    assert 1.0 <= spec["tokens_per_target_step"] <= k + 1
    rows = spec["draft_kv_rows_per_rank"]  # replicated: every rank of a replica holds all its draft rows
    per_replica = world // dp
    assert all(rows[r] == rows[r // per_replica * per_replica] for r in range(world))
    if dp == 1:  # the draft lacks at most the last candidate's row of each request (fed only to the target)
        total = sum(got["stats"]["kv_rows_per_rank"][:dcp])
        assert total - len(REQUESTS) <= rows[0] <= total


@pytest.mark.parametrize("draft", ["self", "near"])
def test_retraction_under_speculative_decoding(reference, drafts, draft):
    """A pool too small for the running set: requests are retracted (draft KV freed too) and recompute on
    return; the outputs still equal plain DCP 1 decoding."""
    cfg = _cfg(2, 2, backend="a2a", draft=drafts[draft], k=3)
    cfg["kv"]["capacity_tokens"], cfg["schedule"] = 12, {"decode_headroom": 1}   # 24 virtual positions
    got = run_ranks(_run, 2, cfg, REQUESTS)[0]
    _same(got, reference)
    assert got["retractions"] > 0


def test_acceptance_rates(drafts):
    greedy = REQUESTS[:3]
    want = run_ranks(_run, 1, _cfg(1, 1), greedy)[0]
    k = 3
    got = run_ranks(_run, 2, _cfg(2, 2, backend="a2a", draft=drafts["self"], k=k), greedy)[0]
    _same(got, want)
    spec = got["stats"]["spec"]
    runs = [-(-(r["max_new_tokens"] - 1) // (k + 1)) for r in greedy]   # first token comes from prefill
    assert spec["acceptance_rate"] == 1.0
    assert spec["tokens_per_target_step"] == sum(r["max_new_tokens"] - 1 for r in greedy) / sum(runs)
    # mixed steps (chunk 6): requests 0 and 1 verify in steps 2 and 3 while request 2's 13-token prompt
    # prefills 4 + 4 + 5 tokens beside them (steps 2-4); request 2 verifies alone in step 5
    assert runs == [2, 2, 1] and spec["target_verify_steps"] == 3
    low = run_ranks(_run, 2, _cfg(2, 2, page=4, draft=drafts["small"], k=k), greedy)[0]
    _same(low, want)
    assert low["stats"]["spec"]["acceptance_rate"] < 0.5


def test_eos_inside_accepted_run(drafts):
    plain = run_ranks(_run, 1, _cfg(1, 1), REQUESTS[1:2])[0]["outputs"][0]["output_ids"]
    eos = plain[3]
    cut = plain[:plain.index(eos) + 1]
    got = run_ranks(_run, 2, _cfg(2, 2, draft=drafts["self"], k=4), REQUESTS[1:2], eos)[0]
    assert got["outputs"][0]["output_ids"] == cut
    assert got["stats"]["kv_rows_per_rank"] == _expected_rows(got["outputs"], 2, 2, 1)


def test_memory_accounting_matches_plan(drafts):
    # per virtual token each rank stores target_row / dcp + draft_row (plan/memory.py): draft KV is unsplit
    mem = run_ranks(_run, 2, _cfg(2, 2, draft=drafts["small"]), REQUESTS[:1])[0]["memory"]
    target_row, draft_row = (kv_row_bytes(spec_from_path(p), "float64")
                             for p in (tiny.ensure_tiny_model(), drafts["small"]))
    assert mem["draft_row"] == draft_row and mem["draft_capacity"] == mem["virtual"]
    assert (mem["target_bytes"] + mem["draft_bytes"]) / mem["virtual"] == target_row / 2 + draft_row


def test_cancel_releases_draft_kv(drafts):
    def run(rank, world):
        eng = _engine(_cfg(1, 1, draft=drafts["near"]))
        for i, req in enumerate(REQUESTS[:2]):
            eng.submit(i, req["prompt_ids"], SamplingParams.from_dict(req))
        for _ in range(3):
            eng.step()
        assert eng.spec.alloc.requests()
        eng.cancel_all()
        eng.check_drained()
        return eng.spec.alloc.free_pages == eng.spec.alloc.num_pages

    assert run_ranks(run, 1) == [True]


def test_only_standalone_runs(drafts):
    cfg = _cfg(1, 1, draft=drafts["self"])
    cfg["speculative"]["algorithm"] = "EAGLE"
    with pytest.raises(LaunchConfigError, match="speculative.algorithm is 'EAGLE'; valid: STANDALONE"):
        _engine(cfg)  # single process: no process group needed


def test_generate_cli_speculative(reference, drafts):
    from dcpctl.cli.main import cli
    req = REQUESTS[1]
    args = ["generate", "--prompt-ids", ",".join(map(str, req["prompt_ids"])), "--max-new-tokens",
            str(req["max_new_tokens"]), "--dtype", "float64", "--page-size", "2", "--format", "json",
            # random weights
            "--model-path", str(tiny.ensure_tiny_model()), "--tp-size", "2", "--dcp-size", "2",
            "--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", drafts["near"],
            # SGLang's spelling of 3 draft tokens
            "--speculative-num-steps", "2", "--speculative-eagle-topk", "1"]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["outputs"][0]["output_ids"] == reference["outputs"][1]["output_ids"]
    assert out["stats"]["spec"]["num_draft_tokens"] == 3
    assert len(set(out["stats"]["spec"]["draft_kv_rows_per_rank"])) == 1
    bad = CliRunner().invoke(cli, args[:-8] + ["--speculative-algorithm", "EAGLE"])  # a valid plan
    assert bad.exit_code == 2 and "supports STANDALONE only" in bad.output


def test_serving_loop_with_joins_and_cancel(reference, drafts):
    from dcpctl.runtime.server.loop import run_loop
    from tests.runtime.engine.test_engine_serve import ScriptedBridge

    def serve(rank, world):
        eng = _engine(_cfg(2, 2, backend="a2a", draft=drafts["near"], k=3))
        bridge = (ScriptedBridge({0: [0, 1], 2: [2], 4: [3]}, {1: 3}, dict(enumerate(REQUESTS)))
                  if rank == 0 else None)
        run_loop(eng, None, bridge)  # raises unless every target page is free at shutdown
        assert not eng.spec.alloc.requests() and eng.spec.alloc.free_pages == eng.spec.alloc.num_pages
        return None if bridge is None else {rid: [e.token for e in evs] for rid, evs in bridge.events.items()}

    got = run_ranks(serve, 2)[0]
    for rid in (0, 2, 3):  # joins mid-decode: prefill batches interleave with speculative steps
        assert got[rid] == reference["outputs"][rid]["output_ids"]
    assert got[1] == reference["outputs"][1]["output_ids"][:len(got[1])]
