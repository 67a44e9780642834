"""POST /v1/completions, /v1/chat/completions (OpenAI) and /generate (SGLang), plain or streamed.

Token budgets: a null max_tokens (max_completion_tokens, max_new_tokens) asks for whatever the context
leaves (OpenAI, vLLM, SGLang); a chat request that names neither gets a modest default, since admission
reserves prompt + budget of KV.  /generate's max_new_tokens 0 answers at once with no new token (SGLang).
"""
from __future__ import annotations

import time
import uuid
from typing import Any, AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from dcpctl.runtime.server.gen import (Chunk, ServerState, check_fits, check_model, chunks, prompt_ids, sampling,
                                      sse_stream, stops, submit)
from dcpctl.runtime.server.protocol import (ApiError, ChatRequest, CompletionRequest, GenerateRequest, check_stream_options,
                                           refuse_unsupported)
from dcpctl.runtime.server.text import chat_prompt, token_text

CHAT_DEFAULT_MAX_TOKENS = 128  # admission reserves prompt + max_tokens of KV: keep the default modest


def _usage(n_prompt: int, n_out: int) -> dict[str, int]:
    return {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out}


def _cmpl_logprobs(state: ServerState, got: list[Chunk], offset: int = 0) -> dict[str, Any]:
    toks = [token_text(state.tok, c.token) for c in got]
    offsets, at = [], offset
    for t in toks:
        offsets.append(at)
        at += len(t)
    return {"tokens": toks, "token_logprobs": [c.logprob for c in got],
            "top_logprobs": [{t: c.logprob} for t, c in zip(toks, got)], "text_offset": offsets}


def _chat_logprobs(state: ServerState, got: list[Chunk]) -> dict[str, Any]:
    out = []
    for c in got:
        t = token_text(state.tok, c.token)
        out.append({"token": t, "logprob": c.logprob, "bytes": list(t.encode()), "top_logprobs": []})
    return {"content": out}


def routes(state: ServerState) -> APIRouter:
    r = APIRouter()

    @r.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Any:
        check_model(state, body.model)
        refuse_unsupported(body)
        check_stream_options(body)
        ids = prompt_ids(state, body.prompt)
        max_tokens = state.limits.room(len(ids)) if body.max_tokens is None else body.max_tokens
        check_fits(state, ids, max_tokens)
        params = sampling(state, max_tokens, body.temperature, body.top_p, body.top_k, body.seed,
                          body.logprobs is not None, body.ignore_eos)
        rid, q = submit(state, ids, params)
        head = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": state.model_name}
        want_lp = body.logprobs is not None
        if body.stream:
            usage = bool((body.stream_options or {}).get("include_usage"))
            return _stream(_completion_events(state, head, chunks(state, rid, q, stops(body.stop)), want_lp,
                                              len(ids) if usage else None))
        got = [c async for c in chunks(state, rid, q, stops(body.stop), request)]
        if not got or got[-1].finish is None:
            return None  # the client went away
        choice = {"index": 0, "text": "".join(c.text for c in got), "finish_reason": got[-1].finish,
                  "logprobs": _cmpl_logprobs(state, got) if want_lp else None}
        return head | {"choices": [choice], "usage": _usage(len(ids), len(got))}

    @r.post("/v1/chat/completions")
    async def chat(body: ChatRequest, request: Request) -> Any:
        check_model(state, body.model)
        refuse_unsupported(body)
        check_stream_options(body)
        ids = prompt_ids(state, chat_prompt(state.tok, [{"role": m.role, "content": m.text()} for m in body.messages]),
                         "messages")
        max_tokens, param = _chat_budget(state, body, len(ids))
        check_fits(state, ids, max_tokens, param)
        params = sampling(state, max_tokens, body.temperature, body.top_p, body.top_k, body.seed, body.logprobs,
                          body.ignore_eos)
        rid, q = submit(state, ids, params)
        head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": state.model_name}
        if body.stream:
            usage = bool((body.stream_options or {}).get("include_usage"))
            return _stream(_chat_events(state, head, chunks(state, rid, q, stops(body.stop)), body.logprobs,
                                        len(ids) if usage else None))
        got = [c async for c in chunks(state, rid, q, stops(body.stop), request)]
        if not got or got[-1].finish is None:
            return None
        msg = {"role": "assistant", "content": "".join(c.text for c in got)}
        choice = {"index": 0, "message": msg, "finish_reason": got[-1].finish,
                  "logprobs": _chat_logprobs(state, got) if body.logprobs else None}
        return head | {"choices": [choice], "usage": _usage(len(ids), len(got))}

    @r.post("/generate")
    async def generate(body: GenerateRequest, request: Request) -> Any:
        sp = body.sampling_params
        refuse_unsupported(body)
        refuse_unsupported(sp, "sampling_params.")
        if (body.text is None) == (body.input_ids is None):
            raise ApiError(400, "give exactly one of text and input_ids", "text")
        ids = prompt_ids(state, body.text if body.text is not None else body.input_ids,
                         "text" if body.text is not None else "input_ids")
        max_new = state.limits.room(len(ids)) if sp.max_new_tokens is None else sp.max_new_tokens
        check_fits(state, ids, max_new, "max_new_tokens")
        if max_new == 0:
            return _nothing_to_generate(len(ids), body.stream)
        params = sampling(state, max_new, sp.temperature, sp.top_p, sp.top_k, sp.seed, body.return_logprob,
                          sp.ignore_eos)
        rid, q = submit(state, ids, params)
        events = _generate_events(rid, len(ids), chunks(state, rid, q, stops(sp.stop),
                                                        None if body.stream else request), body.return_logprob)
        if body.stream:
            return _stream(events)
        last = None
        async for last in events:
            pass
        return last if last is not None and last["meta_info"]["finish_reason"] else None

    return r


def _chat_budget(state: ServerState, body: ChatRequest, n_prompt: int) -> tuple[int, str]:
    """(max new tokens, the field that set it): max_completion_tokens wins over the deprecated max_tokens."""
    for name in ("max_completion_tokens", "max_tokens"):
        if getattr(body, name) is not None:
            return getattr(body, name), name
    if body.model_fields_set & {"max_completion_tokens", "max_tokens"}:      # an explicit null: no limit
        return state.limits.room(n_prompt), "max_tokens"
    return min(CHAT_DEFAULT_MAX_TOKENS, state.limits.room(n_prompt)), "max_tokens"


def _nothing_to_generate(n_prompt: int, stream: bool) -> Any:
    out = {"text": "", "output_ids": [], "meta_info": {"id": uuid.uuid4().hex, "prompt_tokens": n_prompt,
                                                       "completion_tokens": 0, "finish_reason": {"type": "length"}}}
    if stream:
        async def one() -> AsyncIterator[dict[str, Any]]:
            yield out
        return _stream(one())
    return out


def _stream(events: AsyncIterator[dict[str, Any]]) -> StreamingResponse:
    return StreamingResponse(sse_stream(events), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _completion_events(state: ServerState, head: dict, it: AsyncIterator[Chunk], want_lp: bool,
                             n_prompt: int | None) -> AsyncIterator[dict[str, Any]]:
    n, at = 0, 0
    async for c in it:
        n += 1
        lp = _cmpl_logprobs(state, [c], at) if want_lp else None
        at += len(c.text)
        yield head | {"choices": [{"index": 0, "text": c.text, "logprobs": lp, "finish_reason": c.finish}]}
    if n_prompt is not None:
        yield head | {"choices": [], "usage": _usage(n_prompt, n)}


async def _chat_events(state: ServerState, head: dict, it: AsyncIterator[Chunk], want_lp: bool,
                       n_prompt: int | None) -> AsyncIterator[dict[str, Any]]:
    head = head | {"object": "chat.completion.chunk"}
    yield head | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    n = 0
    async for c in it:
        n += 1
        lp = _chat_logprobs(state, [c]) if want_lp else None
        yield head | {"choices": [{"index": 0, "delta": {"content": c.text} if c.text else {}, "logprobs": lp,
                                   "finish_reason": c.finish}]}
    if n_prompt is not None:
        yield head | {"choices": [], "usage": _usage(n_prompt, n)}


async def _generate_events(rid: int, n_prompt: int, it: AsyncIterator[Chunk],
                           want_lp: bool) -> AsyncIterator[dict[str, Any]]:
    # SGLang streams the cumulative text and ids in every event
    text, ids, lps = "", [], []
    async for c in it:
        text, ids, lps = text + c.text, ids + [c.token], lps + [c.logprob]
        meta: dict[str, Any] = {"id": str(rid), "prompt_tokens": n_prompt, "completion_tokens": len(ids),
                                "finish_reason": {"type": c.finish} if c.finish else None}
        if want_lp:
            meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(lps, ids)]
        yield {"text": text, "output_ids": ids, "meta_info": meta}
