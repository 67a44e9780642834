"""Token choice from logits: greedy, temperature, top-k, top-p, min-p, with a seeded torch.Generator.

    sample(logits [N, V], temperature=0.0, top_k=-1, top_p=1.0, generator=None, min_p=0.0) -> (ids [N], logprobs [N])
    greedy(logits [N, V]) -> ids [N]
    greedy_rows(logits [N, V]) -> (ids [N], [2, N] ids as floats and their logprobs)   on the logits' device
    chosen_logprobs(logits [N, V], ids [N]) -> [N]    log_softmax of the unmodified logits
    filter_logits(logits [N, V], temperature, top_k, top_p, min_p) -> [N, V]   (-inf outside the kept set)
    make_generator(seed) -> torch.Generator (CPU)

The logprob is always of the unmodified distribution (before temperature and filtering), computed
in fp32, or float64 for float64 logits. Random draws use the CPU generator whatever the logits'
device (exponential race: argmax p / E with E ~ Exp(1), the Gumbel-max trick), so a seed gives the same tokens
on every rank and device. top_k <= 0, top_p >= 1 and min_p <= 0 switch those filters off; temperature <= 0 is
greedy. top_k = 1 is greedy. min_p keeps the tokens whose probability after temperature is at least min_p times
the most likely one's (vLLM's and SGLang's rule; the ratio, hence the kept set, is the same before or after the
other filters renormalize).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor


def _acc(logits: Tensor) -> Tensor:
    # logits: [N, V] -> [N, V] in the accumulation dtype (float64 stays, else float32)
    return logits.to(torch.float64 if logits.dtype == torch.float64 else torch.float32)


def make_generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed))


def is_greedy(temperature: float, top_k: int) -> bool:
    """Whether sample() takes the argmax (no random draw)."""
    return temperature <= 0 or top_k == 1


def greedy(logits: Tensor) -> Tensor:
    # logits: [N, V] -> [N] int64
    return logits.argmax(-1)


def greedy_rows(logits: Tensor) -> tuple[Tensor, Tensor]:
    """(ids [N] int64, [2, N] of the ids as floats (exact in fp32 below 2^24) and their log-probabilities), on
    the logits' device: row for row what sample() computes for a greedy request."""
    ids = greedy(logits)
    lps = chosen_logprobs(logits, ids)
    return ids, torch.stack([ids.to(lps.dtype), lps])


def chosen_logprobs(logits: Tensor, ids: Tensor) -> Tensor:
    # logits: [N, V]  ids: [N] -> [N] log p(id) in fp32 (float64 for float64 logits)
    lp = torch.log_softmax(_acc(logits), dim=-1)
    return lp.gather(-1, ids.to(lp.device).long().view(-1, 1)).view(-1)


def filter_logits(logits: Tensor, temperature: float, top_k: int = -1, top_p: float = 1.0,
                  min_p: float = 0.0) -> Tensor:
    # logits: [N, V] -> [N, V] scaled by 1/temperature; tokens outside top-k / top-p / min-p are -inf
    x = _acc(logits) / max(temperature, 1e-6)
    if min_p > 0.0:     # p_i >= min_p * p_max  <=>  x_i >= x_max + log(min_p)
        x = x.masked_fill(x < x.max(-1, keepdim=True).values + math.log(min_p), float("-inf"))
    if 0 < top_k < x.shape[-1]:
        kth = x.topk(top_k, dim=-1).values[:, -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if top_p < 1.0:
        sorted_x, order = x.sort(dim=-1, descending=True)
        probs = sorted_x.softmax(-1)
        before = probs.cumsum(-1) - probs  # mass of strictly better tokens; the best is always kept
        drop = torch.zeros_like(before, dtype=torch.bool).scatter(-1, order, before >= top_p)
        x = x.masked_fill(drop, float("-inf"))
    return x


def sample(logits: Tensor, temperature: float = 0.0, top_k: int = -1, top_p: float = 1.0,
           generator: torch.Generator | None = None, min_p: float = 0.0) -> tuple[Tensor, Tensor]:
    """Choose one token per row; returns (ids [N] int64, logprobs [N] of the chosen ids)."""
    if logits.dim() == 1:
        ids, lp = sample(logits[None], temperature, top_k, top_p, generator, min_p)
        return ids[0], lp[0]
    if is_greedy(temperature, top_k):
        ids = greedy(logits)
    else:
        probs = filter_logits(logits, temperature, top_k, top_p, min_p).softmax(-1).cpu()
        race = torch.empty(probs.shape, dtype=probs.dtype).exponential_(generator=generator)
        ids = (probs / race).argmax(-1).to(logits.device)
    return ids, chosen_logprobs(logits, ids)
