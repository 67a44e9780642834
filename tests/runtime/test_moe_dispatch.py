"""MoE dispatch: one sort and one host sync per layer give exactly the per-expert (token, slot) lists,
in the same order, as one nonzero() per expert (the oracle tests cover the numerics end to end)."""
import pytest
import torch

from dcpctl.runtime.models.mlp import MoE


class _Rank(MoE):
    def __init__(self, first: int, n: int):   # only what dispatch reads: this rank's expert range
        self.first, self.experts = first, [None] * n


@pytest.mark.parametrize("seed", range(40))
def test_dispatch_equals_one_nonzero_per_expert(seed):
    g = torch.Generator().manual_seed(seed)
    experts, k = 16, int(torch.randint(1, 5, (1,), generator=g))
    tokens = int(torch.randint(0, 40, (1,), generator=g))
    idx = torch.stack([torch.randperm(experts, generator=g)[:k] for _ in range(tokens)]) if tokens \
        else torch.zeros(0, k, dtype=torch.long)
    rank = _Rank(first=int(torch.randint(0, 12, (1,), generator=g)), n=int(torch.randint(1, 6, (1,), generator=g)))
    want = []
    for j in range(len(rank.experts)):
        tok, slot = torch.nonzero(idx == rank.first + j, as_tuple=True)
        if tok.numel():
            want.append((j, tok, slot))
    got = rank._dispatch(idx)
    assert [j for j, _, _ in got] == [j for j, _, _ in want]
    for (_, t1, s1), (_, t2, s2) in zip(got, want):
        assert torch.equal(t1, t2) and torch.equal(s1, s2)
