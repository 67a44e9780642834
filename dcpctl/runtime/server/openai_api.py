"""POST /v1/completions, /v1/chat/completions (OpenAI) and /generate (SGLang), plain or streamed.

Every parameter SGLang or vLLM documents is applied with their meaning (the bodies in protocol.py; one rule
for all three routes in sampling_args.py) or refused with a 400 naming it (params.py).  Token budgets: a null
max_tokens (max_completion_tokens, max_new_tokens) asks for whatever the context leaves (OpenAI, vLLM,
SGLang); a chat request that names neither gets a modest default, since admission reserves prompt + budget of
KV. /generate's max_new_tokens 0 answers at once with no new token (SGLang).
"""
from __future__ import annotations

import time
import uuid
from typing import Any, AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from dcpctl.runtime.server import responses as out
from dcpctl.runtime.server.gen import (ServerState, check_fits, check_model, chunks, prompt_ids, sse_stream,
                                       submit)
from dcpctl.runtime.server.params import refuse_unsupported
from dcpctl.runtime.server.protocol import (ApiError, ChatRequest, CompletionRequest, GenerateRequest,
                                           check_stream_options)
from dcpctl.runtime.server.sampling_args import engine_params, text_options
from dcpctl.runtime.server.text import chat_prompt

CHAT_DEFAULT_MAX_TOKENS = 128  # admission reserves prompt + max_tokens of KV: keep the default modest


def _head(state: ServerState, kind: str, prefix: str, body: Any) -> dict[str, Any]:
    rid = f"{prefix}-{body.request_id}" if body.request_id else body.rid or f"{prefix}-{uuid.uuid4().hex}"
    return {"id": rid, "object": kind, "created": int(time.time()), "model": state.model_name}


def routes(state: ServerState) -> APIRouter:
    r = APIRouter()

    @r.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Any:
        check_model(state, body.model)
        refuse_unsupported(body.model_extra)
        check_stream_options(body)
        if body.echo and body.logprobs is not None:
            raise ApiError(400, "echo with logprobs needs the prompt's log-probabilities, which this server "
                                "does not compute (prompt_logprobs is refused too)", "echo")
        ids = prompt_ids(state, body.prompt, add_bos=body.add_special_tokens,
                         truncate=(body.truncate_prompt_tokens, body.truncation_side))
        max_tokens = state.limits.room(len(ids)) if body.max_tokens is None else body.max_tokens
        check_fits(state, ids, max_tokens)
        params = await engine_params(state, body, max_tokens, seed=body.seed, min_tokens=body.min_tokens or 0,
                                     logprobs=body.logprobs is not None)
        rid, q = submit(state, ids, params)
        echo = (body.prompt if isinstance(body.prompt, str) and body.truncate_prompt_tokens is None
                else state.tok.decode(ids)) if body.echo else ""
        shape = _shape(state, body, _head(state, "text_completion", "cmpl", body), ids,
                       body.logprobs is not None, echo)
        opts = text_options(body, params.min_tokens)
        if body.stream:
            return _stream(out.completion_events(shape,
                                                 chunks(state, rid, q, opts, keepalive=state.keepalive_s)))
        got = [c async for c in chunks(state, rid, q, opts, request)]
        # else: the client left
        return out.completion(shape, got) if got and got[-1].finish is not None else None

    @r.post("/v1/chat/completions")
    async def chat(body: ChatRequest, request: Request) -> Any:
        check_model(state, body.model)
        refuse_unsupported(body.model_extra)
        check_stream_options(body)
        msgs = [{"role": m.role, "content": m.text()} for m in body.messages]
        ids = _chat_ids(state, body, msgs)
        max_tokens, param = _chat_budget(state, body, len(ids))
        check_fits(state, ids, max_tokens, param)
        params = await engine_params(state, body, max_tokens, seed=body.seed, min_tokens=body.min_tokens or 0,
                                     logprobs=bool(body.logprobs))
        rid, q = submit(state, ids, params)
        echo = msgs[-1]["content"] if body.echo and msgs[-1]["role"] == "assistant" else ""
        shape = _shape(state, body, _head(state, "chat.completion", "chatcmpl", body), ids,
                       bool(body.logprobs), echo)
        shape.prompt_token_ids = body.return_prompt_token_ids
        opts = text_options(body, params.min_tokens)
        if body.stream:
            return _stream(out.chat_events(shape, chunks(state, rid, q, opts, keepalive=state.keepalive_s)))
        got = [c async for c in chunks(state, rid, q, opts, request)]
        return out.chat(shape, got) if got and got[-1].finish is not None else None

    @r.post("/generate")
    async def generate(body: GenerateRequest, request: Request) -> Any:
        sp = body.sampling_params
        refuse_unsupported(body.model_extra)
        refuse_unsupported(sp.model_extra, "sampling_params.")
        if (body.text is None) == (body.input_ids is None):
            raise ApiError(400, "give exactly one of text and input_ids", "text")
        ids = prompt_ids(state, body.text if body.text is not None else body.input_ids,
                         "text" if body.text is not None else "input_ids")
        max_new = state.limits.room(len(ids)) if sp.max_new_tokens is None else sp.max_new_tokens
        check_fits(state, ids, max_new, "max_new_tokens")
        params = await engine_params(state, sp, max_new, seed=sp.seed if sp.sampling_seed is None
                                     else sp.sampling_seed, min_tokens=sp.min_new_tokens or 0,
                                     logprobs=bool(body.return_logprob), prefix="sampling_params.")
        if max_new == 0:
            return _nothing_to_generate(len(ids), body.stream, body.rid)
        rid, q = submit(state, ids, params)
        shape = out.Shape(state.tok, {}, ids, logprobs=bool(body.return_logprob),
                          prompt_token_ids=body.return_prompt_token_ids,
                          text_in_logprobs=body.return_text_in_logprobs)
        opts = text_options(sp, params.min_tokens)
        events = out.generate_events(shape, body.rid or str(rid),
                                     chunks(state, rid, q, opts, None if body.stream else request,
                                            state.keepalive_s if body.stream else None))
        if body.stream:
            return _stream(events)
        last = None
        async for last in events:
            pass
        return last if last is not None and last["meta_info"]["finish_reason"] else None

    return r


def _shape(state: ServerState, body: Any, head: dict[str, Any], ids: list[int], logprobs: bool,
           echo: str) -> out.Shape:
    return out.Shape(state.tok, head, ids, logprobs=logprobs, token_ids=bool(body.return_token_ids),
                     as_ids=bool(body.return_tokens_as_token_ids), echo=echo,
                     usage=bool(body.stream_options and body.stream_options.include_usage))


def _chat_ids(state: ServerState, body: ChatRequest, msgs: list[dict[str, str]]) -> list[int]:
    """The prompt: SGLang's input_ids as given, else the chat template over the messages."""
    if body.input_ids is not None:
        return prompt_ids(state, body.input_ids, "input_ids")
    if body.continue_final_message and body.add_generation_prompt:
        raise ApiError(400, "continue_final_message continues the last message, add_generation_prompt starts "
                            "a new one: set add_generation_prompt to false with it (as vLLM requires)",
                       "continue_final_message")
    prompt = chat_prompt(state.tok, msgs, body.add_generation_prompt, body.continue_final_message,
                         body.chat_template_kwargs)
    return prompt_ids(state, prompt, "messages", truncate=(body.truncate_prompt_tokens, body.truncation_side))


def _chat_budget(state: ServerState, body: ChatRequest, n_prompt: int) -> tuple[int, str]:
    """(max new tokens, the field that set it): max_completion_tokens wins over the deprecated max_tokens."""
    for name in ("max_completion_tokens", "max_tokens"):
        if getattr(body, name) is not None:
            return getattr(body, name), name
    if body.model_fields_set & {"max_completion_tokens", "max_tokens"}:      # an explicit null: no limit
        return state.limits.room(n_prompt), "max_tokens"
    return min(CHAT_DEFAULT_MAX_TOKENS, state.limits.room(n_prompt)), "max_tokens"


def _nothing_to_generate(n_prompt: int, stream: bool, rid: str | None) -> Any:
    body = {"text": "", "output_ids": [],
            "meta_info": {"id": rid or uuid.uuid4().hex, "prompt_tokens": n_prompt,
                          "completion_tokens": 0, "finish_reason": {"type": "length"}}}
    if stream:
        async def one() -> AsyncIterator[dict[str, Any]]:
            yield body
        return _stream(one())
    return body


def _stream(events: AsyncIterator[dict[str, Any] | None]) -> StreamingResponse:
    return StreamingResponse(sse_stream(events), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
