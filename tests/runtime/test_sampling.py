"""Sampling: greedy, seeded temperature / top-k / top-p, and the chosen-token logprob."""
from __future__ import annotations

import math

import torch

from dcpctl.runtime.sampling import chosen_logprobs, filter_logits, greedy, make_generator, sample


def _logits(n: int = 4, v: int = 50, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    return (3 * torch.randn(n, v, generator=torch.Generator().manual_seed(seed))).to(dtype)


def test_greedy_is_argmax_with_logprob():
    x = _logits()
    ids, lp = sample(x)
    assert ids.tolist() == x.argmax(-1).tolist() == greedy(x).tolist()
    torch.testing.assert_close(lp, torch.log_softmax(x, -1).max(-1).values)


def test_top_k_one_is_greedy_even_when_hot():
    x = _logits()
    ids, _ = sample(x, temperature=5.0, top_k=1, generator=make_generator(3))
    assert ids.tolist() == x.argmax(-1).tolist()


def test_seeded_sampling_is_reproducible_and_seed_dependent():
    x = _logits(n=8, v=1000)
    runs = [sample(x, 1.0, 50, 0.9, make_generator(7))[0].tolist() for _ in range(2)]
    other = sample(x, 1.0, 50, 0.9, make_generator(8))[0].tolist()
    assert runs[0] == runs[1] and runs[0] != other


def test_single_row_input():
    x = _logits(n=1)[0]
    tok, lp = sample(x, 0.7, generator=make_generator(1))
    assert tok.dim() == 0 and lp.dim() == 0


def test_top_k_and_top_p_restrict_the_support():
    x = _logits(n=1, v=30)
    kept_k = set(x[0].topk(5).indices.tolist())
    probs = x[0].softmax(-1)
    order = probs.argsort(descending=True)
    need = int((probs[order].cumsum(0) < 0.6).sum()) + 1  # smallest prefix reaching 0.6
    kept_p = set(order[:need].tolist())
    g = make_generator(0)
    seen_k = {int(sample(x, 1.0, top_k=5, generator=g)[0]) for _ in range(300)}
    seen_p = {int(sample(x, 1.0, top_p=0.6, generator=g)[0]) for _ in range(300)}
    assert seen_k <= kept_k and len(seen_k) > 1
    assert seen_p <= kept_p
    assert torch.isfinite(filter_logits(x, 1.0, top_p=0.6)).sum() == need


def test_sampling_frequencies_follow_temperature():
    x = torch.tensor([[0.0, math.log(3.0)]])  # p = (0.25, 0.75)
    g = make_generator(123)
    draws = torch.stack([sample(x, 1.0, generator=g)[0] for _ in range(4000)]).float()
    assert abs(draws.mean().item() - 0.75) < 0.03


def test_logprobs_are_normalized_and_float64_stays_float64():
    x = _logits(n=3, v=20, dtype=torch.float64)
    all_ids = torch.arange(20).repeat(3, 1)
    lps = torch.stack([chosen_logprobs(x, all_ids[:, j]) for j in range(20)], dim=1)
    assert lps.dtype == torch.float64
    torch.testing.assert_close(lps.exp().sum(-1), torch.ones(3, dtype=torch.float64), rtol=0, atol=1e-12)
    assert chosen_logprobs(x.to(torch.bfloat16), all_ids[:, 0]).dtype == torch.float32
