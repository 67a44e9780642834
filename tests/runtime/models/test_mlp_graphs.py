"""Each layer's MLP captured at token buckets (runtime/models/mlp_graphs.py) on CPU, where a replay runs the
same piece eagerly on the same static buffers: padded rows (stale on purpose) change no real row, a MoE routes
none of them to an expert, calls past the largest bucket replay in up to MAX_PASSES passes of it (longer ones
run eagerly), and an engine with the pieces gives every request the tokens and log-probabilities it gets
without them (float64, the tiny DeepSeek model with a dense and a MoE layer), at DCP 1 and 2, chunked, with
attention DP; the launch flags resolve SGLang's buckets.
"""
import pytest
import torch

from dcpctl.launch.cuda_graphs import prefill_section, sglang_prefill_tokens
from dcpctl.plan.errors import UserError
from dcpctl.runtime.models.mlp import MoE
from dcpctl.runtime.models.mlp_graphs import MAX_PASSES, MlpGraphs, why_not
from dcpctl.runtime.parallel import ParallelState
from tests.dist import run_ranks
from tests.runtime.engine.test_engine import launch_cfg

REQUESTS = [
    {"prompt_ids": [5, 1, 7], "max_new_tokens": 6, "logprobs": True},
    {"prompt_ids": [(3 * i + 1) % 11 + 1 for i in range(17)], "max_new_tokens": 5, "logprobs": True},
    {"prompt_ids": [2, 9, 4, 4, 1, 8], "max_new_tokens": 7, "temperature": 0.8, "top_k": 10, "seed": 3,
     "logprobs": True},
]
BUCKETS = [4, 8, 12]


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    from dcpctl.runtime.tiny import write_tiny_model
    return str(write_tiny_model(tmp_path_factory.mktemp("mlpg") / "m", num_hidden_layers=2,
                                first_k_dense_replace=1))


def _model(path, ps=None):
    from dcpctl.runtime.models import load_model
    return load_model(path, ps or ParallelState.single(), False, torch.float64, "cpu")


def test_padded_rows_change_no_real_row(path):
    model = _model(path)
    assert isinstance(model.layers[1].mlp, MoE) and why_not(model) is None
    g = MlpGraphs(model, BUCKETS)
    torch.manual_seed(0)
    for t in (1, 3, 5, 12, 13, 24, 30):
        x = torch.randn(t, model.cfg.hidden_size, dtype=torch.float64)
        g.inp.normal_(0, 30.0)                          # stale rows past t: far from any real row
        for layer in model.layers:
            want = layer.mlp(x)
            got = g(layer.mlp, x)
            assert got.shape == want.shape
            torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    # past the largest bucket (12): up to MAX_PASSES passes of 12 tokens, the last at its own bucket (13 = 12
    # + 1, 24 = 12 + 12); 30 tokens would take 3: the eager MLP
    assert MAX_PASSES == 2 and g.replays == 2 * (4 + 2 + 2)
    assert g.bucket(5) == 8 and g.bucket(13) is None


def test_moe_routes_no_padded_row(path):
    moe = _model(path).layers[1].mlp
    x = torch.randn(6, moe.router.weight.shape[1], dtype=torch.float64)
    _, idx = moe.router(x)
    order, ends = moe._by_expert(idx, torch.tensor(4))
    rows = order[:int(ends[-1])] // idx.shape[1]
    assert rows.numel() == 4 * idx.shape[1] and int(rows.max()) == 3


def _generate(rank, world, path, cfg, buckets):
    from dcpctl.runtime.engine import Engine
    from tests.runtime.configs import config
    ps = (ParallelState.build(cfg["groups"], cfg["topology"]["attn_dp_size"])
          if world > 1 else ParallelState.single())
    model = _model(path, ps)
    engine = Engine(model, ps, config(dict(cfg, model={"path": path, "dtype": "float64"})))
    if buckets:
        model.mlp_graphs = MlpGraphs(model, buckets)
    out = engine.generate([dict(r) for r in REQUESTS])["outputs"]
    return out, model.mlp_graphs.replays if buckets else 0


@pytest.mark.parametrize("world,dcp,dp", [(1, 1, 1), (2, 2, 1), (2, 1, 2)])
def test_engine_with_pieces_matches_eager(path, world, dcp, dp):
    cfg = launch_cfg(world, dcp, dp, capacity=96, chunk=5)
    want = run_ranks(lambda r, w: _generate(r, w, path, cfg, []), world)
    got = run_ranks(lambda r, w: _generate(r, w, path, cfg, BUCKETS), world)
    for (g, replays), (w, _) in zip(got, want):
        assert replays > 0
        for a, b in zip(g, w):
            assert a["output_ids"] == b["output_ids"]
            torch.testing.assert_close(torch.tensor(a["output_logprobs"]), torch.tensor(b["output_logprobs"]),
                                       rtol=0, atol=1e-9)


def test_prefill_section_follows_sglang():
    on = prefill_section("cuda", False, None, None, None, 8192)
    assert on["prefill_tokens"] == sglang_prefill_tokens(8192)
    assert on["prefill_tokens"][:3] == [4, 8, 12] and on["prefill_tokens"][-1] == 8192
    assert prefill_section("cuda", False, None, None, None, 2048)["prefill_tokens"][-1] == 2048
    assert prefill_section("cuda", False, None, None, None, -1)["prefill_tokens"][-1] == 8192
    assert prefill_section("cuda", False, None, 512, None, 8192)["prefill_tokens"][-1] == 512
    assert prefill_section("cuda", False, None, None, [64, 8, 64], 8192)["prefill_tokens"] == [8, 64]
    for off in (prefill_section("cpu", False, None, None, None, 8192),
                prefill_section("cuda", True, None, None, None, 8192),
                prefill_section("cuda", False, "disabled", None, None, 8192)):
        assert off["prefill_tokens"] == [] and "off" in off["prefill_reason"]
    with pytest.raises(UserError, match="full"):
        prefill_section("cuda", False, "full", None, None, 8192)
    with pytest.raises(UserError, match="> --cuda-graph-max-bs-prefill"):
        prefill_section("cuda", False, None, 16, [32], 8192)


def test_each_pass_routes_exactly_its_real_rows(path, monkeypatch):
    # passes of 4 tokens (mlp.BLOCK_TOKENS patched): a call of t tokens replayed at bucket b routes, in pass
    # i, exactly the real tokens min(max(t - i, 0), 4) x k rows to experts, none of the padding
    from dcpctl.runtime.models import mlp as mlp_mod
    monkeypatch.setattr(mlp_mod, "BLOCK_TOKENS", 4)
    model = _model(path)
    moe = model.layers[1].mlp
    k = moe.router.cfg.top_k
    routed, by_expert = [], moe._by_expert
    monkeypatch.setattr(moe, "_by_expert", lambda idx, valid=None: routed.append(
        int(by_expert(idx, valid)[1][-1])) or by_expert(idx, valid))
    g = MlpGraphs(model, [12])
    x = torch.randn(11, model.cfg.hidden_size, dtype=torch.float64)
    routed.clear()
    torch.testing.assert_close(g(moe, x), moe(x), rtol=0, atol=1e-12)
    replayed, eager = routed[:3], routed[3:]
    assert replayed == [4 * k, 4 * k, 3 * k] and eager == [4 * k, 4 * k, 3 * k]


def test_prefill_flags_that_contradict_or_leave_nothing_say_so():
    from dcpctl.cli.generate import cuda_graph_options
    flags = {"disable_prefill_cuda_graph": True, "cuda_graph_backend_prefill": "breakable"}
    with pytest.raises(UserError, match="contradicts"):
        cuda_graph_options(dict(flags), "cuda", 8, 8192)
    none = prefill_section("cuda", False, None, 2, None, 8192)
    assert none["prefill_tokens"] == [] and "off" in none["prefill_reason"]
    assert cuda_graph_options({"disable_prefill_cuda_graph": True}, "cuda", 8, 8192)["prefill_tokens"] == []
