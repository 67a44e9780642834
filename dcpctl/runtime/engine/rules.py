"""Per-request logit rules, applied to a row of logits before it is sampled (engine/sample.py).

    min_tokens         EOS and stop_token_ids -> -inf while fewer than min_tokens tokens came out (vLLM,
                       SGLang)
    allowed_token_ids  every other id -> -inf (vLLM)
    logit_bias         bias added to the named ids' logits (OpenAI: before the softmax, after nothing else)
    grammar            ids the request's llguidance matcher rejects -> -inf; the matcher takes each chosen
                       token

Every rank of a replica applies the same rules to the same logits and draws with the same generator, so the
DCP path is unchanged: the rules act on the gathered logits [N, V] the ranks sample from, never on attention.
The matcher's mask is computed on the host (llguidance, a bitmask of 32 ids per int32) and expanded on the
logits' device.  A grammar that has ended (or entered an error state, which the HTTP side's check prevents)
allows only EOS, so the request ends there.
"""
from __future__ import annotations

import functools
from typing import Any

import torch
from torch import Tensor

from dcpctl.runtime.engine.request import Sequence

@functools.lru_cache(maxsize=None)
def _bits(device: torch.device) -> Tensor:
    # [32] the bit positions, made once per device (a grammar row runs on every step)
    return torch.arange(32, dtype=torch.int32, device=device)


def bitmask_to_bool(words: Tensor, vocab: int, device: torch.device) -> Tensor:
    # words: [W] int32 (bit j of word i: id 32i + j allowed) -> [vocab] bool on `device`; ids past 32W are
    # refused
    bits = ((words.to(device).unsqueeze(-1) >> _bits(device)) & 1).view(-1).bool()
    if bits.numel() >= vocab:
        return bits[:vocab]
    return torch.cat([bits, torch.zeros(vocab - bits.numel(), dtype=torch.bool, device=device)])


class LogitRules:
    """The rules of every running request on this rank; matchers are built on a request's first row."""

    def __init__(self, eos: set[int], model_path: str) -> None:
        self.eos, self.model_path = sorted(eos), model_path
        self._tokenizer: Any = None
        self._matchers: dict[int, Any] = {}

    def apply(self, row: Tensor, seq: Sequence) -> Tensor:
        """row: [1, V] -> [1, V] in fp32 (float64 stays) with this request's rules applied (a new tensor)."""
        p = seq.params
        x = row.to(torch.float64 if row.dtype == torch.float64 else torch.float32, copy=True)
        if p.logit_bias:
            ids = torch.tensor([t for t, _ in p.logit_bias], device=x.device)
            x[0].index_add_(0, ids,
                            torch.tensor([b for _, b in p.logit_bias], dtype=x.dtype, device=x.device))
        if p.allowed_token_ids:
            keep = torch.zeros(x.shape[-1], dtype=torch.bool, device=x.device)
            keep[torch.tensor(p.allowed_token_ids, device=x.device)] = True
            x.masked_fill_(~keep, float("-inf"))
        if p.grammar is not None:
            x.masked_fill_(~self._grammar_mask(seq, x.shape[-1], x.device), float("-inf"))
        if len(seq.output) < p.min_tokens:
            stops = torch.tensor(self.eos + list(p.stop_token_ids), device=x.device)
            x[0, stops] = float("-inf")
        return x

    def accept(self, seq: Sequence, token: int) -> None:
        """The chosen token, once per emitted token of a request with a grammar."""
        m = self._matchers.get(seq.rid)
        if m is not None and not m.is_stopped():
            m.consume_token(token)

    def forget(self, rid: int) -> None:
        self._matchers.pop(rid, None)

    def _grammar_mask(self, seq: Sequence, vocab: int, device: torch.device) -> Tensor:
        m = self._matchers.get(seq.rid)
        if m is None:
            m = self._matchers[seq.rid] = self._grammars().matcher(seq.params.grammar)
        if m.is_error() or m.is_stopped():
            mask = torch.zeros(vocab, dtype=torch.bool, device=device)
            mask[torch.tensor(self.eos, device=device)] = True
            return mask
        words = torch.frombuffer(bytearray(m.compute_bitmask()), dtype=torch.int32)
        return bitmask_to_bool(words, vocab, device)

    def _grammars(self) -> Any:
        if self._tokenizer is None:     # on the first request with a grammar: most servers never build it
            from dcpctl.runtime.grammar import GrammarTokenizer
            self._tokenizer = GrammarTokenizer(self.model_path, self.eos, 0)
        return self._tokenizer
