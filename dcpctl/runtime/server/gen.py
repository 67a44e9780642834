"""One request's life on rank 0's HTTP side: validate, submit, stream chunks, cancel on exit.

    check_model(state, body.model)                  404 in OpenAI's shape for a model we do not serve
    ids = prompt_ids(state, prompt)                 text -> BOS + tokens; ids checked against the vocab and the
                                                    context (limits.py: a prompt leaves room for one token)
    check_fits(state, ids, max_tokens)              prompt + max_tokens within max_model_len, naming both limits
    params = sampling(state, ...)                   no seed: a fresh one; top_k at or above the vocab: off
    rid, q = submit(state, ids, params)             503 when the queue is full or the engine is dead
    async for chunk in chunks(state, rid, q, stop, request)   cancels the request unless it finished

A non-streaming request watches its client (`request`): a task waits on the connection for the disconnect
message and wakes the request, which cancels it in the engine at once, not after its max_tokens; a streamed
response is cancelled by Starlette when its client goes.  A request is counted as finished once, by whoever
closes it in the bridge first (the engine's finish or this side's cancel: bridge.py).
"""
from __future__ import annotations

import asyncio
import json
import secrets
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from starlette.requests import Request

from dcpctl.runtime.engine.events import Event
from dcpctl.runtime.engine.request import SamplingParams
from dcpctl.runtime.server.bridge import GONE, Bridge, EngineDead, Failure, Overloaded
from dcpctl.runtime.server.limits import ServerLimits
from dcpctl.runtime.server.metrics import Metrics
from dcpctl.runtime.server.protocol import ApiError
from dcpctl.runtime.server.text import TextStream

@dataclass
class ServerState:
    bridge: Bridge
    tok: Any
    model_name: str
    vocab_size: int
    context_len: int          # --context-length, else the model's max_position_embeddings
    capacity: int             # virtual KV tokens of one replica
    metrics: Metrics
    api_key: str | None = None
    max_request_bytes: int = 1 << 20
    created: int = 0
    allowed_hosts: tuple[str, ...] | None = None   # None: any Host header (guard.py)
    kv_extra: int = 0         # KV rows a request writes past plain decode (speculative: num_draft_tokens)
    health_timeout_s: float = 20.0   # /health's one-token generation waits this long (health.py)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def limits(self) -> ServerLimits:
        return ServerLimits(self.context_len, self.capacity, self.kv_extra)


@dataclass(frozen=True)
class Chunk:
    text: str
    token: int
    logprob: float
    finish: str | None        # None while running, else "stop" | "length"


def prompt_ids(state: ServerState, prompt: Any, param: str = "prompt") -> list[int]:
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        if len(prompt) != 1:
            raise ApiError(400, f"{param} holds {len(prompt)} prompts; send one prompt per request", param)
        prompt = prompt[0]
    ids = state.tok.encode(prompt, add_bos=True) if isinstance(prompt, str) else list(prompt)
    if not ids:
        raise ApiError(400, f"{param} is empty", param)
    bad = [i for i in ids if not 0 <= i < state.vocab_size]
    if bad:
        raise ApiError(400, f"token id {bad[0]} in {param} is outside the vocabulary (vocab_size "
                            f"{state.vocab_size})", param)
    state.limits.check_prompt(len(ids), param)
    return ids


def check_fits(state: ServerState, ids: list[int], max_tokens: int, param: str = "max_tokens") -> None:
    state.limits.check_budget(len(ids), max_tokens, param)


def check_model(state: ServerState, model: str | None) -> None:
    if model is not None and model != state.model_name:
        raise ApiError(404, f"the model {model!r} does not exist: this server serves {state.model_name!r} "
                            "(see /v1/models)", "model")


def sampling(state: ServerState, max_tokens: int, temperature: float, top_p: float, top_k: int = -1,
             seed: int | None = None, logprobs: bool = False, ignore_eos: bool = False) -> SamplingParams:
    """Engine parameters: every int fits the int64 control message (protocol.py bounds them)."""
    return SamplingParams(max_new_tokens=max_tokens, temperature=temperature, top_p=top_p,
                          top_k=-1 if top_k >= state.vocab_size else top_k,
                          seed=secrets.randbits(63) if seed is None else seed, logprobs=logprobs,
                          ignore_eos=ignore_eos)


def stops(stop: Any) -> list[str]:
    return [stop] if isinstance(stop, str) else list(stop or [])


def submit(state: ServerState, ids: list[int], params: SamplingParams) -> tuple[int, asyncio.Queue]:
    try:
        return state.bridge.open(ids, params)
    except (Overloaded, EngineDead) as e:
        raise ApiError(503, str(e), kind="server_error") from None


async def chunks(state: ServerState, rid: int, q: asyncio.Queue, stop: list[str],
                 request: Request | None = None) -> AsyncIterator[Chunk]:
    """Chunks until the request finishes; `request` given: stop as soon as that client goes away."""
    text, finished = TextStream(state.tok, stop), False
    watch = asyncio.ensure_future(_watch(request, q)) if request is not None else None
    try:
        while True:
            item = q.get_nowait() if not q.empty() else await q.get()   # no task or timer per token
            if item is GONE:
                return
            if isinstance(item, Failure):
                raise ApiError(503, item.message, kind="server_error")
            ev: Event = item
            finished = bool(ev.finish)
            if ev.finish == "abort":
                raise ApiError(500, "the engine refused this request", kind="server_error")
            delta = text.push(ev.token, final=finished)
            if text.stopped or finished:
                yield Chunk(delta, ev.token, ev.logprob, "stop" if text.stopped else ev.finish)
                return
            yield Chunk(delta, ev.token, ev.logprob, None)
    finally:
        if watch is not None:
            watch.cancel()
        if not finished:  # a stop string matched, or the client went away: the engine never reports it
            state.bridge.cancel(rid, "stop" if text.stopped else "abort")


async def _watch(request: Request, q: asyncio.Queue) -> None:
    # the body is read, so the connection's next message is the disconnect (uvicorn sends nothing else)
    while (await request.receive())["type"] != "http.disconnect":
        await asyncio.sleep(0.1)    # a server that answered something else at once: do not spin on it
    q.put_nowait(GONE)


def sse(obj: Any) -> str:
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n"


async def sse_stream(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[str]:
    """SSE lines of `events`, then [DONE]; an error after the headers went out becomes an error event."""
    try:
        async for obj in events:
            yield sse(obj)
    except ApiError as e:
        yield sse({"error": {"message": e.message, "type": e.kind, "param": e.param, "code": e.status}})
    yield sse("[DONE]")
