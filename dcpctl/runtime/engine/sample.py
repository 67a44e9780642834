"""Per-request token choice from logits rows: the engine's adapter to dcpctl.runtime.sampling.

Every rank of a replica calls this with the same logits and the same per-request generators
(seeded from the request's seed), so choices agree; the engine still broadcasts them.
"""
from __future__ import annotations

import torch
from torch import Tensor

from dcpctl.runtime.engine.request import Sequence


def _filtered(logits: Tensor, temperature: float, top_k: int, top_p: float) -> Tensor:
    # logits: [V] -> [V] scaled, with tokens outside top-k / top-p set to -inf
    x = logits / temperature
    if 0 < top_k < x.numel():
        x = x.masked_fill(x < torch.topk(x, top_k).values[-1], -torch.inf)
    if top_p < 1.0:
        sorted_x, order = torch.sort(x, descending=True)
        cum = torch.softmax(sorted_x, -1).cumsum(-1)
        drop = cum - torch.softmax(sorted_x, -1) >= top_p   # keep the smallest prefix reaching top_p
        x = x.masked_fill(torch.zeros_like(drop).scatter(0, order, drop), -torch.inf)
    return x


class Sampler:
    """Greedy / temperature / top-k / top-p with a per-request seeded generator."""

    def __init__(self) -> None:
        self._gens: dict[int, torch.Generator] = {}

    def _gen(self, seq: Sequence) -> torch.Generator:
        if seq.rid not in self._gens:
            self._gens[seq.rid] = torch.Generator().manual_seed(seq.params.seed)
        return self._gens[seq.rid]

    def one(self, logits: Tensor, seq: Sequence) -> tuple[int, float]:
        # logits: [V] -> (token id, logprob of it under the unmodified distribution)
        logits = logits.to(torch.float64 if logits.dtype == torch.float64 else torch.float32)
        p = seq.params
        if p.temperature <= 0:
            tok = int(torch.argmax(logits))
        else:
            probs = torch.softmax(_filtered(logits, p.temperature, p.top_k, p.top_p), -1)
            tok = int(torch.multinomial(probs, 1, generator=self._gen(seq)))
        return tok, float(torch.log_softmax(logits, -1)[tok])

    def __call__(self, logits: Tensor, seqs: list[Sequence]) -> tuple[list[int], list[float]]:
        # logits: [N, V] -> N ids, N logprobs
        picks = [self.one(logits[i], s) for i, s in enumerate(seqs)]
        return [t for t, _ in picks], [lp for _, lp in picks]
