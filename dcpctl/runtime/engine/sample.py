"""Per-request token choice: the engine's adapter to dcpctl.runtime.sampling.

Each request keeps its own CPU generator seeded from its seed; every rank of a replica calls this
with the same logits in the same order, so choices agree (the engine still broadcasts them).
"""
from __future__ import annotations

import torch
from torch import Tensor

from dcpctl.runtime import sampling
from dcpctl.runtime.engine.request import Sequence
from dcpctl.runtime.sampling import greedy_rows


def greedy_all(seqs: list[Sequence]) -> bool:
    """Whether every request takes the argmax (no random draw)."""
    return all(sampling.is_greedy(s.params.temperature, s.params.top_k) for s in seqs)


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
        if greedy_all(seqs):
            both = greedy_rows(logits)[1].cpu()     # the whole batch, one device-to-host copy
            return both[0].long().tolist(), both[1].tolist()
        ids, lps = [], []
        for i, seq in enumerate(seqs):
            p = seq.params
            tok, lp = sampling.sample(logits[i:i + 1], p.temperature, p.top_k, p.top_p, self._gen(seq))
            ids.append(int(tok[0]))
            lps.append(float(lp[0]))
        return ids, lps

    def forget(self, rid: int) -> None:
        self._gens.pop(rid, None)

    def state(self, rid: int) -> Tensor | None:
        """Request `rid`'s generator state (None if it never sampled): PD hands it to the decode side."""
        gen = self._gens.get(rid)
        return gen.get_state() if gen is not None else None

    def resume(self, rid: int, seed: int, state: Tensor) -> None:
        """Continue request `rid`'s random stream from `state` (taken with `state` on another instance)."""
        self._gens[rid] = sampling.make_generator(seed)
        self._gens[rid].set_state(state)
