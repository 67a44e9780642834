"""One request's life on rank 0's HTTP side: validate, submit, stream chunks, cancel on exit.

    check_model(state, body.model)                  404 in OpenAI's shape for a model we do not serve
    ids = prompt_ids(state, prompt)                 text -> BOS + tokens; ids checked against the vocab and
                                                    the context (limits.py: a prompt leaves room for one
                                                    token)
    check_fits(state, ids, max_tokens)              prompt + max_tokens within max_model_len, naming both
                                                    limits
    params = await engine_params(state, body, ...)  sampling_args.py
    rid, q = submit(state, ids, params)             503 when the queue is full or the engine is dead
    async for chunk in chunks(state, rid, q, text_options, request, keepalive)   cancels it unless it finished

A non-streaming request watches its client (`request`): a task waits on the connection for the disconnect
message and wakes the request, which cancels it in the engine at once, not after its max_tokens; a streamed
response is cancelled by Starlette when its client goes.  A request is counted as finished once, by whoever
closes it in the bridge first (the engine's finish or this side's cancel: bridge.py).  A streamed request
that waits (queued, or retracted and recomputing) yields None every `keepalive` seconds without a token, which
the stream sends as an SSE comment, so a proxy's read timeout does not cut it.  A request that ends at EOS or
a stop token drops that token's text unless it keeps stops (vLLM's and SGLang's rule).
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from starlette.requests import Request

from dcpctl.runtime.engine.events import Event
from dcpctl.runtime.engine.request import SamplingParams
from dcpctl.runtime.server.bridge import GONE, Bridge, EngineDead, Failure, Overloaded
from dcpctl.runtime.server.limits import ServerLimits
from dcpctl.runtime.server.metrics import Metrics
from dcpctl.runtime.server.protocol import ApiError
from dcpctl.runtime.server.sampling_args import TextOptions
from dcpctl.runtime.server.text import TextStream

KEEPALIVE = object()   # put on a streamed request's queue when it has waited `keepalive` seconds for a token

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
    model_path: str = ""      # the checkpoint: its tokenizer compiles structured output grammars
                              # (structured.py)
    keepalive_s: float = 15.0   # a waiting stream sends an SSE comment this often (a proxy's 60 s read
                                # timeout holds)
    json_options: dict[str, Any] = field(default_factory=dict)   # JSON grammars' whitespace
                                                                 # (runtime/grammar.py)
    extra: dict[str, Any] = field(default_factory=dict)

    def grammar_tokenizer(self) -> Any:
        """The served checkpoint's tokenizer as llguidance reads it, built on the first structured request."""
        if "grammar_tokenizer" not in self.extra:
            from dcpctl.runtime.grammar import GrammarTokenizer
            eos = [e for e in (getattr(self.tok, "eos_token_id", None),) if e is not None]
            self.extra["grammar_tokenizer"] = GrammarTokenizer(self.model_path, eos, self.vocab_size)
        return self.extra["grammar_tokenizer"]

    @property
    def limits(self) -> ServerLimits:
        return ServerLimits(self.context_len, self.capacity, self.kv_extra)


@dataclass(frozen=True)
class Chunk:
    text: str
    token: int
    logprob: float
    finish: str | None        # None while running, else "stop" | "length"


def prompt_ids(state: ServerState, prompt: Any, param: str = "prompt", add_bos: bool = True,
               truncate: tuple[int | None, str | None] = (None, None)) -> list[int]:
    """The prompt's ids; `truncate` (vLLM's truncate_prompt_tokens, truncation_side) keeps its last (left, the
    default) or first (right) N tokens, -1 meaning the longest prompt served."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        if len(prompt) != 1:
            raise ApiError(400, f"{param} holds {len(prompt)} prompts; send one prompt per request", param)
        prompt = prompt[0]
    ids = state.tok.encode(prompt, add_bos=add_bos) if isinstance(prompt, str) else list(prompt)
    if truncate[0] is not None:
        keep = state.limits.max_model_len - 1 if truncate[0] == -1 else truncate[0]
        ids = (ids[:keep] if truncate[1] == "right" else ids[len(ids) - keep:]) if len(ids) > keep else ids
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


def submit(state: ServerState, ids: list[int], params: SamplingParams) -> tuple[int, asyncio.Queue]:
    try:
        return state.bridge.open(ids, params)
    except (Overloaded, EngineDead) as e:
        raise ApiError(503, str(e), kind="server_error") from None


async def chunks(state: ServerState, rid: int, q: asyncio.Queue, opts: TextOptions,
                 request: Request | None = None,
                 keepalive: float | None = None) -> AsyncIterator[Chunk | None]:
    """Chunks until the request finishes; `request` given: stop as soon as that client goes away; `keepalive`
    given: None after every `keepalive` seconds without a token."""
    text, finished = TextStream(state.tok, opts.stop, opts.keep_stop, opts.skip_special,
                                opts.min_tokens), False
    watch = asyncio.ensure_future(_watch(request, q)) if request is not None else None
    ticker = _Ticker(q, keepalive) if keepalive else None
    try:
        while True:
            item = q.get_nowait() if not q.empty() else await q.get()   # no task or timer per token
            if item is KEEPALIVE:
                yield None
                continue
            if item is GONE:
                return
            if isinstance(item, Failure):
                raise ApiError(503, item.message, kind="server_error")
            ev: Event = item
            if ticker is not None:
                ticker.heard()
            finished = bool(ev.finish)
            if ev.finish == "abort":
                raise ApiError(500, "the engine refused this request", kind="server_error")
            drop = ev.finish == "stop" and not opts.keep_stop    # EOS or a stop token: its text is not output
            delta = text.flush() if drop else text.push(ev.token, final=finished)
            if text.stopped or finished:
                yield Chunk(delta, ev.token, ev.logprob, "stop" if text.stopped else ev.finish)
                return
            yield Chunk(delta, ev.token, ev.logprob, None)
    finally:
        if watch is not None:
            watch.cancel()
        if ticker is not None:
            ticker.stop()
        if not finished:  # a stop string matched, or the client went away: the engine never reports it
            state.bridge.cancel(rid, "stop" if text.stopped else "abort")


class _Ticker:
    """Puts KEEPALIVE on a request's queue after every `every` seconds in which no token arrived: one timer
    per interval, not one per token (heard() only notes the time)."""

    def __init__(self, q: asyncio.Queue, every: float) -> None:
        self.q, self.every = q, every
        self.loop = asyncio.get_running_loop()
        self.last = self.loop.time()
        self.handle = self.loop.call_later(every, self._tick)

    def heard(self) -> None:
        self.last = self.loop.time()

    def _tick(self) -> None:
        quiet = self.loop.time() - self.last
        if quiet >= self.every * 0.999:
            self.q.put_nowait(KEEPALIVE)
            self.last, quiet = self.loop.time(), 0.0
        self.handle = self.loop.call_later(self.every - quiet, self._tick)

    def stop(self) -> None:
        self.handle.cancel()


async def _watch(request: Request, q: asyncio.Queue) -> None:
    # the body is read, so the connection's next message is the disconnect (uvicorn sends nothing else)
    while (await request.receive())["type"] != "http.disconnect":
        await asyncio.sleep(0.1)    # a server that answered something else at once: do not spin on it
    q.put_nowait(GONE)


def sse(obj: Any) -> str:
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n"


async def sse_stream(events: AsyncIterator[dict[str, Any] | None]) -> AsyncIterator[str]:
    """SSE lines of `events` (None: a comment line, which SSE clients skip), then [DONE]; an error after the
    headers went out becomes an error event."""
    try:
        async for obj in events:
            yield sse(obj) if obj is not None else ": keep-alive\n\n"
    except ApiError as e:
        yield sse({"error": {"message": e.message, "type": e.kind, "param": e.param, "code": e.status}})
    yield sse("[DONE]")
