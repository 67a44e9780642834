"""Per-request token choice: the engine's adapter to dcpctl.runtime.sampling.

Each request keeps its own CPU generator seeded from its seed; every rank of a replica calls this
with the same logits in the same order, so choices agree (the engine still broadcasts them).
"""
from __future__ import annotations

import torch
from torch import Tensor

from dcpctl.runtime import sampling
from dcpctl.runtime.engine.request import Sequence


class Sampler:
    """Greedy / temperature / top-k / top-p per request; logprobs of the unmodified distribution."""

    def __init__(self) -> None:
        self._gens: dict[int, torch.Generator] = {}

    def _gen(self, seq: Sequence) -> torch.Generator:
        if seq.rid not in self._gens:
            self._gens[seq.rid] = sampling.make_generator(seq.params.seed)
        return self._gens[seq.rid]

    def __call__(self, logits: Tensor, seqs: list[Sequence]) -> tuple[list[int], list[float]]:
        # logits: [N, V] -> N ids, N logprobs
        ids, lps = [], []
        for i, seq in enumerate(seqs):
            p = seq.params
            tok, lp = sampling.sample(logits[i:i + 1], p.temperature, p.top_k, p.top_p, self._gen(seq))
            ids.append(int(tok[0]))
            lps.append(float(lp[0]))
        return ids, lps

    def forget(self, rid: int) -> None:
        self._gens.pop(rid, None)
