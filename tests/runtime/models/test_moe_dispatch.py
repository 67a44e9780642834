"""MoE dispatch and combine: one sort gives exactly the per-expert (token, slot) rows, in the same order, as
one nonzero() per expert; the grouped GEMMs and the per-expert chains, combined by moe_combine, equal Hugging
Face's form (an fp32 accumulator, index_add_ per expert); the oracle tests cover the numerics end to end."""
import pytest
import torch

from dcpctl.runtime.models.mlp import MoE


class _Rank(MoE):
    def __init__(self, first: int, n: int):   # only what dispatch reads: this rank's expert range
        self.first, self.experts = first, [None] * n


def _random_rank(first: int, n: int, hidden: int, inter: int, g: torch.Generator):
    # a rank of n bf16 experts with random weights -> (rank, weights(*shape): more bf16 draws from g)
    from dcpctl.runtime.models.mlp import DenseMLP

    def weights(*shape):
        return (torch.randn(*shape, generator=g, device=g.device) * 0.2).to(torch.bfloat16)
    rank = _Rank(first, n)
    rank.experts = [DenseMLP("e.", {"e.gate_proj.weight": weights(inter, hidden),
                                    "e.up_proj.weight": weights(inter, hidden),
                                    "e.down_proj.weight": weights(hidden, inter)}) for _ in range(n)]
    return rank, weights


def _per_expert(rank, idx):
    # the oracle: (local expert j, tokens, their top-k slots) from one nonzero() per expert, tokens ascending
    out = []
    for j in range(len(rank.experts)):
        tok, slot = torch.nonzero(idx == rank.first + j, as_tuple=True)
        if tok.numel():
            out.append((j, tok, slot))
    return out


def _hf_form(rank, x, w, idx):
    # Hugging Face's DeepseekV3MoE.moe: an accumulator in the weights' dtype, index_add_ of each expert's rows
    acc = torch.zeros(x.shape, dtype=w.dtype)
    for j, tok, slot in _per_expert(rank, idx):
        acc.index_add_(0, tok, rank.experts[j](x[tok]).to(w.dtype) * w[tok, slot, None])
    return acc.to(x.dtype)


@pytest.mark.parametrize("seed", range(40))
def test_sorted_rows_equal_one_nonzero_per_expert(seed):
    g = torch.Generator().manual_seed(seed)
    experts, k = 16, int(torch.randint(1, 5, (1,), generator=g))
    tokens = int(torch.randint(0, 40, (1,), generator=g))
    idx = torch.stack([torch.randperm(experts, generator=g)[:k] for _ in range(tokens)]) if tokens \
        else torch.zeros(0, k, dtype=torch.long)
    rank = _Rank(first=int(torch.randint(0, 12, (1,), generator=g)),
                 n=int(torch.randint(1, 6, (1,), generator=g)))
    order, ends = rank._by_expert(idx)
    want = {j: (tok, slot) for j, tok, slot in _per_expert(rank, idx)}
    start = 0
    for j, end in enumerate(ends.tolist()):
        rows = order[start:end]
        if j in want:
            assert torch.equal(rows // k, want[j][0]) and torch.equal(rows % k, want[j][1])
        else:
            assert rows.numel() == 0
        start = end


@pytest.mark.parametrize("first,n,tokens", [(0, 8, 5), (3, 4, 9), (6, 2, 1), (0, 8, 64)])
def test_per_expert_chains_and_combine_equal_hf_in_float64(first, n, tokens):
    # the path without grouped GEMMs (CPU, and block-FP8 experts past GROUPED_MAX_TOKENS), other ranks'
    # experts included (first > 0 or n < 8): rows of tokens routed only elsewhere come out exactly zero
    from dcpctl.runtime.models.mlp import DenseMLP
    g = torch.Generator().manual_seed(first * 100 + n + tokens)
    D, inter, k, experts = 64, 32, 3, 8
    rank = _Rank(first, n)
    rank.stacked = None
    rank.experts = [DenseMLP("e.",
                             {f"e.{m}.weight": torch.randn(*shape, generator=g, dtype=torch.float64) * 0.2
                              for m, shape in (("gate_proj", (inter, D)), ("up_proj", (inter, D)),
                                               ("down_proj", (D, inter)))}) for _ in range(n)]
    x = torch.randn(tokens, D, generator=g, dtype=torch.float64)
    idx = torch.stack([torch.randperm(experts, generator=g)[:k] for _ in range(tokens)])
    w = torch.rand(tokens, k, generator=g, dtype=torch.float64)
    got, want = rank._routed(x, w, idx), _hf_form(rank, x, w, idx)
    torch.testing.assert_close(got, want, atol=1e-13, rtol=1e-12)
    other = torch.isin(idx - first, torch.arange(n)).any(1) == 0
    assert torch.equal(got[other], torch.zeros_like(got[other]))


@pytest.mark.skipif(not hasattr(torch, "_grouped_mm"), reason="torch without _grouped_mm")
@pytest.mark.parametrize("first,n,tokens", [(0, 8, 5), (3, 4, 9), (6, 2, 1), (0, 8, 64)])
def test_grouped_gemms_equal_the_per_expert_loop(first, n, tokens):
    # bf16 on the CPU (torch._grouped_mm runs there too); the GPU picks this path by grouped_mm_ok
    g = torch.Generator().manual_seed(first * 100 + n + tokens)
    D, inter, k, experts = 64, 32, 3, 8
    rank, weights = _random_rank(first, n, D, inter, g)
    x = weights(tokens, D) * 5
    idx = torch.stack([torch.randperm(experts, generator=g)[:k] for _ in range(tokens)])
    w = torch.rand(tokens, k, generator=g)
    loop = _hf_form(rank, x, w, idx)
    rank.stack_experts()
    got = rank._grouped(x, w, idx)
    assert got.dtype == torch.bfloat16 and torch.isfinite(got).all()
    err = (got.float() - loop.float()).norm() / loop.float().norm().clamp_min(1e-30)
    assert err < 2e-2, err
    other = torch.isin(idx - first, torch.arange(n)).any(1) == 0      # tokens routed only to other ranks
    assert torch.equal(got[other], torch.zeros_like(got[other]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU only: sync detection and graph capture")
def test_grouped_moe_never_syncs_and_captures_in_a_cuda_graph():
    from dcpctl.runtime.models.mlp import grouped_mm_ok
    dev, D, inter, k = torch.device("cuda"), 64, 32, 3
    g = torch.Generator(device=dev).manual_seed(0)
    rank, weights = _random_rank(2, 4, D, inter, g)
    if not grouped_mm_ok(rank.experts[0].gate):
        pytest.skip("grouped GEMMs need an sm_90+ GPU")
    rank.stack_experts()
    x = weights(16, D)
    idx = torch.randint(0, 8, (16, k), generator=g, device=dev)
    w = torch.rand(16, k, generator=g, device=dev)
    want = rank._grouped(x, w, idx)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")       # any device-to-host sync raises
    try:
        rank._grouped(x, w, idx)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        rank._grouped(x, w, idx)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = rank._grouped(x, w, idx)
    graph.replay()                                 # capture itself fails on any sync inside it
    torch.cuda.synchronize()
    assert out.abs().sum() > 0
    torch.testing.assert_close(out.float(), want.float(), atol=2e-3, rtol=2e-2)


@pytest.mark.skipif(not hasattr(torch, "_grouped_mm"), reason="torch without _grouped_mm")
def test_loaded_model_takes_the_grouped_path_and_matches_the_loop(monkeypatch, tmp_path):
    # load the tiny model twice in bf16 on the CPU, once with the grouped path forced on (as grouped_mm_ok
    # says on an H200): experts stacked with views, the same layer outputs, long chunks in passes of
    # BLOCK_TOKENS
    from dcpctl.runtime.models import load_model, mlp
    from dcpctl.runtime.parallel import ParallelState
    from dcpctl.runtime.tiny import write_tiny_model
    path = write_tiny_model(tmp_path / "tiny")
    plain = load_model(path, ParallelState.single(), False, torch.bfloat16, torch.device("cpu"))
    monkeypatch.setattr(mlp, "grouped_mm_ok", lambda w: True)
    grouped = load_model(path, ParallelState.single(), False, torch.bfloat16, torch.device("cpu"))
    layer = 1                                                   # first_k_dense_replace = 1: layer 1 is MoE
    a, b = plain.layers[layer].mlp, grouped.layers[layer].mlp
    assert a.stacked is None and b.stacked is not None
    assert all(e.gate.data_ptr() == b.stacked[0][j].data_ptr() for j, e in enumerate(b.experts))
    calls = []
    original = mlp.MoE._grouped
    monkeypatch.setattr(mlp.MoE, "_grouped", lambda self, *args: calls.append(1) or original(self, *args))
    g = torch.Generator().manual_seed(0)
    for tokens in (0, 7, mlp.GROUPED_MAX_TOKENS + 1, mlp.BLOCK_TOKENS + 3):
        x = torch.randn(tokens, 64, generator=g).to(torch.bfloat16)
        want, got = a(x), b(x)
        assert got.shape == want.shape
        if tokens:
            err = (got.float() - want.float()).norm() / want.float().norm()
            assert err < 2e-2, (tokens, err)
    assert len(calls) == 4          # bf16 experts run grouped at any size: 7, 513, then 4099 as 4096 + 3
                                    # tokens
