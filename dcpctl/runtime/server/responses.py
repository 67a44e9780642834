"""Response bodies and stream events of the three routes, from a request's chunks (gen.py).

    Shape(head, n_prompt, ...)    what a route's response carries besides the text: id/model head, logprobs,
                                  token ids (return_token_ids), echoed text, usage in the stream
    completion(shape, chunks) / completion_events(shape, it)     /v1/completions (OpenAI, vLLM, SGLang)
    chat(shape, chunks) / chat_events(shape, it)                 /v1/chat/completions
    generate_events(shape, it)                                   SGLang /generate: cumulative text and ids
A None from the chunk stream (a keep-alive) passes through as None: sse_stream sends it as a comment.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from dcpctl.runtime.server.gen import Chunk
from dcpctl.runtime.server.text import token_text

Events = AsyncIterator[dict[str, Any] | None]


@dataclass
class Shape:
    tok: Any
    head: dict[str, Any]
    prompt_ids: list[int]
    logprobs: bool = False
    token_ids: bool = False        # return_token_ids: token_ids (and prompt_token_ids) on the choice
    prompt_token_ids: bool = False  # SGLang chat's return_prompt_token_ids
    as_ids: bool = False           # return_tokens_as_token_ids: logprob tokens as "token_id:N"
    echo: str = ""                 # text that leads the output (completions echo, chat echo)
    usage: bool = False            # stream_options.include_usage
    text_in_logprobs: bool = False  # /generate's return_text_in_logprobs
    extra: dict[str, Any] = field(default_factory=dict)

    def name(self, token: int) -> str:
        return f"token_id:{token}" if self.as_ids else token_text(self.tok, token)

    def ids(self, got: list[Chunk], first: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"token_ids": [c.token for c in got]} if self.token_ids else {}
        if first and (self.token_ids or self.prompt_token_ids):
            out["prompt_token_ids"] = self.prompt_ids
        return out


def usage(n_prompt: int, n_out: int) -> dict[str, int]:
    return {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out}


def _cmpl_logprobs(s: Shape, got: list[Chunk], offset: int = 0) -> dict[str, Any]:
    toks = [s.name(c.token) for c in got]
    offsets, at = [], offset
    for t in toks:
        offsets.append(at)
        at += len(t)
    return {"tokens": toks, "token_logprobs": [c.logprob for c in got],
            "top_logprobs": [{t: c.logprob} for t, c in zip(toks, got)], "text_offset": offsets}


def _chat_logprobs(s: Shape, got: list[Chunk]) -> dict[str, Any]:
    out = []
    for c in got:
        t = s.name(c.token)
        out.append({"token": t, "logprob": c.logprob, "bytes": list(t.encode()), "top_logprobs": []})
    return {"content": out}


def completion(s: Shape, got: list[Chunk]) -> dict[str, Any]:
    choice = {"index": 0, "text": s.echo + "".join(c.text for c in got), "finish_reason": got[-1].finish,
              "logprobs": _cmpl_logprobs(s, got) if s.logprobs else None} | s.ids(got, True)
    return s.head | {"choices": [choice], "usage": usage(len(s.prompt_ids), len(got))}


async def completion_events(s: Shape, it: AsyncIterator[Chunk | None]) -> Events:
    n, at = 0, 0
    async for c in it:
        if c is None:
            yield None
            continue
        lp = _cmpl_logprobs(s, [c], at) if s.logprobs else None
        text, s.echo = s.echo + c.text, ""
        at += len(c.text)
        choice = {"index": 0, "text": text, "logprobs": lp, "finish_reason": c.finish} | s.ids([c], n == 0)
        n += 1
        yield s.head | {"choices": [choice]}
    if s.usage:
        yield s.head | {"choices": [], "usage": usage(len(s.prompt_ids), n)}


def chat(s: Shape, got: list[Chunk]) -> dict[str, Any]:
    msg = {"role": "assistant", "content": s.echo + "".join(c.text for c in got)}
    choice = {"index": 0, "message": msg, "finish_reason": got[-1].finish,
              "logprobs": _chat_logprobs(s, got) if s.logprobs else None} | s.ids(got, True)
    return s.head | {"choices": [choice], "usage": usage(len(s.prompt_ids), len(got))}


async def chat_events(s: Shape, it: AsyncIterator[Chunk | None]) -> Events:
    head = s.head | {"object": "chat.completion.chunk"}
    first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
    yield head | {"choices": [first | s.ids([], True)]}
    if s.echo:      # vLLM sends the echoed message as a chunk of its own after the role
        yield head | {"choices": [{"index": 0, "delta": {"content": s.echo}, "finish_reason": None}]}
    n = 0
    async for c in it:
        if c is None:
            yield None
            continue
        n += 1
        lp = _chat_logprobs(s, [c]) if s.logprobs else None
        choice = {"index": 0, "delta": {"content": c.text} if c.text else {}, "logprobs": lp,
                  "finish_reason": c.finish} | s.ids([c], False)
        yield head | {"choices": [choice]}
    if s.usage:
        yield head | {"choices": [], "usage": usage(len(s.prompt_ids), n)}


async def generate_events(s: Shape, rid: str, it: AsyncIterator[Chunk | None]) -> Events:
    # SGLang streams the cumulative text and ids in every event
    text, ids, lps = "", [], []
    async for c in it:
        if c is None:
            yield None
            continue
        text, ids, lps = text + c.text, ids + [c.token], lps + [c.logprob]
        meta: dict[str, Any] = {"id": rid, "prompt_tokens": len(s.prompt_ids), "completion_tokens": len(ids),
                                "finish_reason": {"type": c.finish} if c.finish else None}
        if s.logprobs:
            meta["output_token_logprobs"] = [[lp, t, token_text(s.tok, t) if s.text_in_logprobs else None]
                                             for lp, t in zip(lps, ids)]
        yield {"text": text, "output_ids": ids, "meta_info": meta} | (
            {"prompt_token_ids": s.prompt_ids} if s.prompt_token_ids else {})
