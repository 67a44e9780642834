"""Requests as the engine sees them: sampling parameters and per-sequence progress.

SamplingParams beyond temperature / top-k / top-p / min-p are the per-request logit rules (engine/rules.py):
stop_token_ids end a request like EOS; min_tokens masks EOS and the stop ids until that many tokens came out;
logit_bias adds to the chosen ids' logits; allowed_token_ids masks every other id; grammar is an llguidance
grammar (runtime/grammar.py) that masks every token which would leave it.  A request with any rule samples on
the host path (never pipelined: engine/pipeline.py), with the same logits on every rank.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dcpctl.runtime.fits import kv_rows


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 16
    temperature: float = 0.0
    top_k: int = -1          # <= 0: off
    top_p: float = 1.0
    seed: int = 0
    logprobs: bool = False
    ignore_eos: bool = False   # benchmarks: always produce max_new_tokens
    min_p: float = 0.0         # drop tokens below min_p x the most likely token's probability (0: off)
    min_tokens: int = 0        # EOS and stop_token_ids are masked until this many tokens came out
    stop_token_ids: tuple[int, ...] = ()          # finish with "stop" after any of these (even with ignore_eos)
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias added to its logit)
    allowed_token_ids: tuple[int, ...] = ()       # non-empty: only these ids may be sampled
    grammar: str | None = None                    # an llguidance grammar (runtime/grammar.py)

    @property
    def has_rules(self) -> bool:
        """Whether any per-request logit rule applies (engine/rules.py): then it never samples on the pipeline."""
        return bool(self.min_tokens or self.logit_bias or self.allowed_token_ids or self.grammar is not None)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "SamplingParams":
        known = SamplingParams.__dataclass_fields__
        unknown = sorted(set(d) - set(known) - {"prompt_ids"})
        if unknown:
            raise ValueError(f"unknown request keys {unknown}; valid: {['prompt_ids', *known]}")
        kw = {k: v for k, v in d.items() if k in known and v is not None}
        for name in ("stop_token_ids", "allowed_token_ids"):
            if name in kw:
                kw[name] = tuple(int(t) for t in kw[name])
        if "logit_bias" in kw:
            kw["logit_bias"] = tuple((int(t), float(b)) for t, b in dict(kw["logit_bias"]).items())
        return SamplingParams(**kw)


@dataclass
class Sequence:
    """One request on one attention-DP replica.  `computed` tokens have their KV in the cache."""

    rid: int                       # index of the request in the generate() call
    prompt: list[int]
    params: SamplingParams
    output: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    computed: int = 0
    finished: bool = False
    finish_reason: str = ""        # "stop" (EOS), "length" (max_new_tokens) or "abort" (cancelled)
    kv_extra: int = 0              # KV positions reserved beyond plain decode (speculative: K)
    draining: bool = False         # its last token is in flight (engine/pipeline.py): no further steps
    prefill_to: int = -1           # positions its prefill covers: the prompt (-1), or every token after a retraction
    retracted: int = 0             # times the scheduler retracted it (engine/scheduler.py)

    def __post_init__(self) -> None:
        if self.prefill_to < 0:
            self.prefill_to = len(self.prompt)

    @property
    def tokens(self) -> list[int]:
        """prompt + output as one new list (O(length): the per-step paths use num_tokens, token, token_slice)."""
        return self.prompt + self.output

    @property
    def num_tokens(self) -> int:
        return len(self.prompt) + len(self.output)

    def token(self, i: int) -> int:
        """tokens[i] (0 <= i < num_tokens) without building the list."""
        n = len(self.prompt)
        return self.prompt[i] if i < n else self.output[i - n]

    def token_slice(self, start: int, end: int) -> list[int]:
        """tokens[start:end] (0 <= start <= end <= num_tokens) without building the whole list."""
        n = len(self.prompt)
        if end <= n:
            return self.prompt[start:end]
        if start >= n:
            return self.output[start - n:end - n]
        return self.prompt[start:] + self.output[:end - n]

    @property
    def max_kv(self) -> int:
        return kv_rows(len(self.prompt), self.params.max_new_tokens, self.kv_extra)

    def kv_next(self, ahead: int = 1) -> int:
        """KV positions it holds after `ahead` more steps (the next one writes its last token's row, plus the
        speculative rows), at most max_kv."""
        return min(self.max_kv, self.num_tokens - 1 + ahead + self.kv_extra)

    @property
    def prefilling(self) -> bool:
        return self.computed < self.prefill_to

    def result(self) -> dict[str, Any]:
        return {"prompt_ids": self.prompt, "output_ids": self.output,
                "output_logprobs": self.logprobs}
