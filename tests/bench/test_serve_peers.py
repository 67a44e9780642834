"""benchmarks/hf_peer.py, serve_peers.py and serve_report.py on CPU: HF's DeepseekV3 loads the checkpoints
the serve benchmark writes and computes our runtime's logits; the peer's timing rows; the ratio table."""
import json
from pathlib import Path

import pytest
import torch

from benchmarks import decode_step as step
from benchmarks import hf_peer
from benchmarks import serve_peers as peers
from benchmarks import serve_report as report
from dcpctl.runtime.models import load_model
from dcpctl.runtime.parallel import ParallelState
from dcpctl.runtime.tiny import write_tiny_model
from tests.runtime.hf_oracle import hf_decode, load_hf
from tests.runtime.ref_context import greedy_run

transformers = pytest.importorskip("transformers")
PROMPT = [5, 17, 200, 3, 99, 42, 7]
TINY_MOE = {"num_hidden_layers": 3, "first_k_dense_replace": 1, "n_routed_experts": 8,
            "num_experts_per_tok": 2}


@pytest.fixture(scope="module", params=["dense_fp32", "moe_bf16"])
def ckpt(request, tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp(request.param)
    if request.param == "dense_fp32":   # what serve_peers writes for `dense` (at the tiny shape)
        return str(write_tiny_model(d, num_hidden_layers=2, first_k_dense_replace=2))
    return str(peers.write_bf16(d, TINY_MOE, "cpu"))   # what it writes for `moe`


def test_hf_logits_equal_ours_on_the_benchmark_checkpoints(ckpt):
    # float64, HF's fp32 norms/rope/router on our side: the same numbers to ~1 ulp, prefill and cached decode
    ours = load_model(ckpt, ParallelState.single(), False, torch.float64, "cpu", hf_numerics=True)
    pre, dec, outs = greedy_run(ours, [PROMPT], 4)
    ref_pre, ref_dec = hf_decode(load_hf(ckpt), PROMPT, outs[0][:-1])
    torch.testing.assert_close(torch.cat([pre[0], dec[0][:-1]]), torch.cat([ref_pre, ref_dec]), rtol=1e-12,
                               atol=1e-12)


def test_peer_load_and_timing_rows(ckpt):
    # the peer's own load (default experts implementation, EOS ignored) agrees with ours in float32, and a
    # timed cell has one stamp per step: prefill and per-token times positive, p50 <= p90
    model = hf_peer.load(ckpt, torch.float32, "cpu")
    assert model.generation_config.eos_token_id is None
    ours = load_model(ckpt, ParallelState.single(), False, torch.float32, "cpu")
    pre, _, _ = greedy_run(ours, [PROMPT], 1)
    with torch.no_grad():
        ref = model(torch.tensor([PROMPT])).logits[0]
    torch.testing.assert_close(pre[0], ref, rtol=1e-4, atol=1e-4)
    row = hf_peer.time_cell(model, "eager", 2, 8, 4, reps=2, vocab=256, seed=0, device="cpu")
    assert row["mode"] == "eager" and row["batch"] == 2 and row["reps"] == 2
    assert row["prefill_ms"] > 0 and row["decode_ms_per_token"] > 0
    assert 0 < row["itl_ms"]["p50"] <= row["itl_ms"]["p90"]


def test_decode_step_rows_on_the_checkpoint(ckpt, tmp_path, capsys):
    # bench decode's cell on the directory itself (how the MoE checkpoint gets its step time)
    out = tmp_path / "rows.json"
    step.main([ckpt, "--device", "cpu", "--dtype", "float32", "--batches", "1,2", "--contexts", "9", "--steps", "1",
               "--warmup", "0", "-o", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert [(r["batch"], r["context"]) for r in rows] == [(1, 9), (2, 9)]
    assert all(r["step_ms"] > 0 and "error" not in r for r in rows)
    assert rows[1]["kv_bytes_read"] == 2 * rows[0]["kv_bytes_read"]
    with pytest.raises(SystemExit) as e:
        step.main([ckpt, "--device", "cpu", "--cuda-graphs"])
    assert e.value.code == 2 and "--cuda-graphs needs --device cuda" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["1000", "x:1", "1000:0", "1000:1,8:0", "1000:1:2:3"])
def test_bad_cell_exits_2(bad, capsys):
    with pytest.raises(SystemExit) as e:
        hf_peer.main(["DIR", "--cell", bad])
    assert e.value.code == 2 and "--cell" in capsys.readouterr().err


def test_server_variants_follow_the_launch_flags():
    none = dict.fromkeys(("--disable-cuda-graph", "--cuda-graph-max-bs-decode"), False)
    both = dict.fromkeys(none, True)
    assert peers.variants(["graph", "eager"], none) == ["default"]
    assert peers.variants(["graph", "eager"], both) == ["graph", "eager"]


def test_launch_argv_per_variant(tmp_path):
    run = peers.Run(tmp_path, 10, smoke=False)
    flags = dict.fromkeys(("--disable-cuda-graph", "--cuda-graph-max-bs-decode"), True)
    graph = peers.serve_args(Path("/ck"), ["dense", "dense32k"], "graph", flags, run)
    eager = peers.serve_args(Path("/ck"), ["dense"], "eager", flags, run)
    assert graph[graph.index("--cuda-graph-max-bs-decode") + 1] == "32" and "--disable-cuda-graph" not in graph
    assert "--disable-cuda-graph" in eager and "--cuda-graph-max-bs-decode" not in eager
    # room for 32 requests of the longest prompt + 64 output tokens + two pages
    assert int(graph[graph.index("--max-total-tokens") + 1]) == 32 * (32768 + 64 + 128)
    assert graph[graph.index("--device") + 1] == "cuda" and graph[graph.index("--dtype") + 1] == "bfloat16"


def _doc() -> dict:
    def ok(key: str, p50: float) -> dict:
        return {"completed": 1, key: {"p50": p50}}

    serve = {"ready_s": 12.0, "first": ok("ttft_ms", 30.0), "steady": ok("ttft_ms", 10.0),
             "cells": {"dense": {"1": ok("itl_ms", 2.0), "8": {"completed": 0, "itl_ms": {"p50": 0.0}}}}}
    decode = {"rows": [{"batch": 1, "context": 1032, "graph_ms": 1.6, "step_ms": 6.0, "predicted_ms": 0.8},
                       {"batch": 8, "context": 1032, "step_ms": 7.0}]}
    hf = {"rows": [{"mode": "compiled", "batch": 1, "input_len": 1000, "itl_ms": {"p50": 5.0}},
                   {"mode": "eager", "batch": 1, "input_len": 1000, "error": "OutOfMemoryError: ..."}]}
    return {"cells": {"dense": ["dense", 1000, [[1, 8], [8, 24]], 3]}, "output_len": 64,
            "checkpoints": {"dense": {"serve": {"graph": serve}, "decode": decode, "hf": hf}},
            "parts": [{"part": "hf-dense", "rc": 1, "seconds": 3.0}]}


def test_report_ratios_and_gaps():
    s = report.summarize(_doc())
    one, eight = s["cells"]
    assert one["served_vs_graph"] == pytest.approx(1.25) and one["hf_compiled_vs_served"] == pytest.approx(2.5)
    assert one["graph_vs_predicted"] == pytest.approx(2.0) and one["hf_eager_vs_served"] is None
    assert eight["served_itl_p50_ms"] == {"graph": None} and eight["served_vs_graph"] is None
    assert eight["eager_step_ms"] == 7.0 and eight["graph_step_ms"] is None
    assert s["startup"] == [{"checkpoint": "dense", "variant": "graph", "ready_s": 12.0, "first_ttft_ms": 30.0,
                             "steady_ttft_ms": 10.0, "first_vs_steady": pytest.approx(3.0)}]
    md = report.markdown(_doc())
    assert "| dense | 1 | 2.00 | 1.600 | 6.00 | 0.800 | 5.00 | - | 1.25 | 2.50 | 2.00 |" in md
    assert "| dense | 8 | - | - | 7.00 | - |" in md and "hf-dense (rc 1)" in md
