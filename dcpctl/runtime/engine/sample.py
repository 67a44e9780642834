"""Per-request token choice: the engine's adapter to dcpctl.runtime.sampling, with the logit rules.

Each request keeps its own CPU generator seeded from its seed; every rank of a replica calls this
with the same logits in the same order, so choices agree (the engine still broadcasts them).  A request
with logit rules (engine/rules.py: min_tokens, logit_bias, allowed_token_ids, a grammar) samples from its
row after the rules; its logprob is still of the unmodified distribution, as every other request's.
"""
from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

from dcpctl.runtime import sampling
from dcpctl.runtime.engine.request import Sequence
from dcpctl.runtime.engine.rules import LogitRules
from dcpctl.runtime.sampling import greedy_rows


def greedy_all(seqs: list[Sequence]) -> bool:
    """Whether every request takes the argmax of its unmodified logits (no random draw, no logit rule): only
    such a batch may sample on the device pipeline (engine/pipeline.py)."""
    return all(sampling.is_greedy(s.params.temperature, s.params.top_k) and not s.params.has_rules for s in seqs)


class Sampler:
    """Greedy / temperature / top-k / top-p / min-p per request, after its logit rules; logprobs of the
    unmodified distribution."""

    def __init__(self, eos: Iterable[int] = (), model_path: str = "") -> None:
        self._gens: dict[int, torch.Generator] = {}
        self.rules = LogitRules(set(eos), model_path)

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
            ids.append(self._one(logits[i:i + 1], seq, lps))
        return ids, lps

    def _one(self, row: Tensor, seq: Sequence, lps: list[float]) -> int:
        # row: [1, V] -> the chosen id (its logprob appended to lps)
        p = seq.params
        ruled = self.rules.apply(row, seq) if p.has_rules else row
        tok, lp = sampling.sample(ruled, p.temperature, p.top_k, p.top_p, self._gen(seq), p.min_p)
        if ruled is not row:
            lp = sampling.chosen_logprobs(row, tok)
        if p.grammar is not None:
            self.rules.accept(seq, int(tok[0]))
        lps.append(float(lp[0]))
        return int(tok[0])

    def forget(self, rid: int) -> None:
        self._gens.pop(rid, None)
        self.rules.forget(rid)

    def state(self, rid: int) -> Tensor | None:
        """Request `rid`'s generator state (None if it never sampled): PD hands it to the decode side."""
        gen = self._gens.get(rid)
        return gen.get_state() if gen is not None else None

    def resume(self, rid: int, seed: int, state: Tensor) -> None:
        """Continue request `rid`'s random stream from `state` (taken with `state` on another instance)."""
        self._gens[rid] = sampling.make_generator(seed)
        self._gens[rid].set_state(state)
