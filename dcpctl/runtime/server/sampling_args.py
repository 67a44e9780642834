"""A request's applied parameters -> the engine's SamplingParams and the HTTP side's TextOptions, one rule for
/v1/completions, /v1/chat/completions and /generate (where SGLang and vLLM name one thing twice, both names
map to one field: seed / sampling_seed, min_tokens / min_new_tokens, include_stop_str_in_output /
no_stop_trim).

    text_options(body, min_tokens) -> TextOptions      stop strings, whether the stop stays, special tokens
    await engine_params(state, body, max_new, seed=, min_tokens=, logprobs=) -> SamplingParams
        token ids (stop_token_ids, allowed_token_ids, logit_bias keys) checked against the vocabulary (400
        naming the field); the structured output constraint compiled and checked (structured.py); no seed: a
        fresh one; top_k at or above the vocabulary: off. Logit rules need the host sampling path, which
        speculative decoding does not take: with speculative decoding they are a 400.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from dcpctl.runtime.engine.request import SamplingParams
from dcpctl.runtime.server import structured
from dcpctl.runtime.server.protocol import ApiError, declared


@dataclass(frozen=True)
class TextOptions:
    stop: list[str]
    keep_stop: bool = False      # the matched stop string or stop token stays in the text
    skip_special: bool = True
    min_tokens: int = 0          # no stop string counts before this many tokens


def text_options(body: Any, min_tokens: int = 0) -> TextOptions:
    stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
    keep = bool(body.no_stop_trim or declared(body, "include_stop_str_in_output"))
    return TextOptions(stop, keep, body.skip_special_tokens is not False, min_tokens)


def _ids(state: Any, ids: list[int] | None, param: str) -> tuple[int, ...]:
    bad = [i for i in ids or () if not 0 <= i < state.vocab_size]
    if bad:
        raise ApiError(400,
                       f"token id {bad[0]} in {param} is outside the vocabulary (vocab_size "
                       f"{state.vocab_size})",
                       param)
    return tuple(ids or ())


def _bias(state: Any, bias: dict[str, float] | None, param: str) -> tuple[tuple[int, float], ...]:
    out = []
    for key, value in (bias or {}).items():
        if not key.lstrip("-").isdigit():
            raise ApiError(400, f"{param}: key {key!r} is not a token id", param)
        out.append((_ids(state, [int(key)], param)[0], float(value)))
    return tuple(out)


async def engine_params(state: Any, body: Any, max_new: int, *, seed: int | None, min_tokens: int,
                        logprobs: bool, prefix: str = "") -> SamplingParams:
    """The engine's parameters for `body` (the route resolved max_new, seed, min_tokens and logprobs)."""
    found = structured.requested(body, prefix, state.json_options)
    grammar = await structured.check(state, found)
    top_k = -1 if body.top_k is None or body.top_k >= state.vocab_size else body.top_k
    p = SamplingParams(
        max_new_tokens=max_new, temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p, top_k=top_k, min_p=body.min_p or 0.0,
        seed=secrets.randbits(63) if seed is None else seed, logprobs=logprobs, ignore_eos=body.ignore_eos,
        min_tokens=min_tokens, stop_token_ids=_ids(state, body.stop_token_ids, prefix + "stop_token_ids"),
        logit_bias=_bias(state, body.logit_bias, prefix + "logit_bias"),
        allowed_token_ids=_ids(state, declared(body, "allowed_token_ids"), "allowed_token_ids"),
        grammar=grammar)
    if p.has_rules and state.kv_extra:
        raise ApiError(400, "min_tokens, logit_bias, allowed_token_ids and structured output need the host "
                            "sampling path, which speculative decoding does not take: this server runs "
                            "speculative decoding",
                       found[1] if found else _first_rule(p, prefix))
    return p


def _first_rule(p: SamplingParams, prefix: str) -> str:
    # /generate's fields sit under sampling_params. and call min_tokens min_new_tokens
    name = next(n for n in ("min_tokens", "logit_bias", "allowed_token_ids") if getattr(p, n))
    if name == "allowed_token_ids":
        return name
    return prefix + ("min_new_tokens" if prefix and name == "min_tokens" else name)
