"""Fuzz: hypothesis bodies for /v1/completions, /v1/chat/completions and /generate against ONE live
tiny server (2 ranks, DCP 2): wrong types, huge and negative integers, NaN and infinities, long
strings, lone surrogates, nesting, unsupported parameters, and valid one-token bodies with one
number made extreme.  Every answer must be a 2xx or a 4xx JSON error in OpenAI's shape, never a
5xx; a greedy request answers identically before and after.  (With `top_k` left unbounded the
engine dies on such a body and this test fails with a 503.)  The totals are printed
(`-s` shows them).
"""
import json
from collections import Counter

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.serve.server import Server

EXAMPLES = 700  # per endpoint: 3 x 700 = 2,100 generated bodies, plus the fixed corpus below
GREEDY = {"prompt": "The quick fox", "max_tokens": 8, "temperature": 0}
SENT: Counter = Counter()  # (path, status) -> count

# ---- values -----------------------------------------------------------------------------------------
EXTREME_INTS = st.sampled_from([0, -1, 1, 2**31, 2**63 - 1, 2**63, -2**63 - 1, 2**64, 10**30, -10**30])
INTS = st.one_of(st.integers(), EXTREME_INTS)
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from([float("nan"), 1e308, -0.0]))
CHARS = st.one_of(st.characters(), st.characters(categories=["Cs"]),
                  st.sampled_from(["\x00", "\x1b", "\ufffd"]))
TEXT = st.one_of(st.text(CHARS, max_size=6), st.sampled_from(["x" * 3000, "\ud800x", "Hi\udfff"]))
SCALAR = st.one_of(st.none(), st.booleans(), INTS, FLOATS, TEXT)
JUNK = st.recursive(SCALAR,
                    lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(TEXT, c, max_size=4)),
                    max_leaves=4)


def field(good: st.SearchStrategy) -> st.SearchStrategy:
    """A sensible value four times in five, anything the fifth: most bodies then get past some fields."""
    return st.integers(0, 4).flatmap(lambda i: JUNK if i == 0 else good)


PROMPT = st.one_of(st.sampled_from(["Hi", "Hello there", ""]), st.text(CHARS, max_size=8),
                   st.lists(st.integers(-2, 300), max_size=6), st.lists(st.text(max_size=4), max_size=2),
                   st.lists(st.lists(st.integers(0, 259), max_size=3), max_size=2))
SAMPLING = {"temperature": field(st.floats(0, 2)), "top_p": field(st.floats(0, 1)),
            "top_k": field(st.one_of(st.integers(-2, 300), EXTREME_INTS)), "seed": field(INTS),
            "stop": field(st.one_of(TEXT, st.lists(TEXT, max_size=3))), "ignore_eos": field(st.booleans()),
            "n": field(st.integers(0, 3))}
REFUSABLE = {"best_of": field(st.integers(0, 3)), "presence_penalty": field(FLOATS), "prompt_logprobs": JUNK}
IDS = st.lists(st.integers(-2, 300), max_size=3)
GRAMMARS = st.sampled_from(["[0-9]{2}", "(a|b", "x*", "", "\\", '{"type": "integer"}', "{", 'root ::= "a"',
                            "root ::="])
FORMATS = st.sampled_from([{"type": "text"}, {"type": "json_object"}, {"type": "json_schema"}, {"type": 5},
                           {"type": "json_schema", "json_schema": {"schema": {"type": "integer"}}},
                           {"type": "json_schema", "json_schema": {"schema": {"type": "nope"}}},
                           {"type": "structural_tag"}])
APPLIED = {"min_p": field(st.floats(0, 1)), "min_tokens": field(st.integers(0, 3)),
           "stop_token_ids": field(IDS), "allowed_token_ids": field(IDS),
           "skip_special_tokens": field(st.booleans()),
           "logit_bias": field(st.dictionaries(st.sampled_from(["1", "257", "x", "-1", "999"]), FLOATS,
                                               max_size=2)),
           "regex": field(GRAMMARS), "json_schema": field(GRAMMARS), "ebnf": field(GRAMMARS),
           "response_format": field(FORMATS), "truncate_prompt_tokens": field(st.integers(-2, 5)),
           "structured_outputs": field(st.dictionaries(st.sampled_from(
               ["json", "regex", "choice", "grammar", "json_object", "whitespace_pattern",
                "disable_any_whitespace",
                "bogus"]), st.one_of(GRAMMARS, st.booleans(), st.lists(TEXT, max_size=2), JUNK), max_size=2))}
COMMON = {**SAMPLING, **REFUSABLE, **APPLIED,
          "model": field(st.sampled_from(["tiny-deepseek-stdlib", "gpt-4"])), "stream": field(st.booleans()),
          "stream_options": field(st.just({"include_usage": True}))}
MAX_TOKENS = field(st.one_of(st.integers(1, 2), EXTREME_INTS))
MESSAGE = st.fixed_dictionaries({"role": field(st.sampled_from(["user", "system", "assistant", "robot"]))},
                                optional={"content": field(st.one_of(TEXT, st.lists(st.fixed_dictionaries(
                                    {"type": st.sampled_from(["text", "image_url"]),
                                     "text": TEXT}), max_size=2)))})

BODIES = {
    # a token budget is always sent: the defaults (16, chat's room) would make valid bodies slow, not riskier
    "/v1/completions": st.fixed_dictionaries({"prompt": field(PROMPT), "max_tokens": MAX_TOKENS}, optional={
        **COMMON, "logprobs": field(st.integers(-1, 6)), "echo": field(st.booleans())}),
    "/v1/chat/completions": st.fixed_dictionaries({"messages": field(st.lists(MESSAGE, min_size=1,
                                                                              max_size=3)),
                                                   "max_tokens": MAX_TOKENS}, optional={
        **COMMON, "max_completion_tokens": MAX_TOKENS, "logprobs": field(st.booleans()),
        "top_logprobs": field(st.integers(-1, 21)), "tools": JUNK}),
    "/generate": st.fixed_dictionaries({"sampling_params": field(st.fixed_dictionaries(
        {"max_new_tokens": MAX_TOKENS}, optional={**SAMPLING, "frequency_penalty": field(FLOATS),
                                                   "min_new_tokens": field(st.integers(0, 3)),
                                                   **{k: APPLIED[k]
                                                      for k in ("regex", "json_schema", "ebnf", "min_p",
                                                                "stop_token_ids", "logit_bias")}}))},
        optional={
        "text": field(TEXT), "input_ids": field(st.lists(st.integers(-2, 300), max_size=6)),
        "stream": field(st.booleans()), "return_logprob": field(st.booleans())}),
}

# a valid one-token body with one number replaced by an extreme: what must be bounded before the engine
VALID = {"/v1/completions": ({"prompt": "Hi", "max_tokens": 1}, ""),
         "/v1/chat/completions": ({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}, ""),
         "/generate": ({"text": "Hi", "sampling_params": {"max_new_tokens": 1}}, "sampling_params")}
NUMBERS = ["top_k", "seed", "temperature", "top_p", "max_tokens", "logprobs", "n", "best_of",
           "presence_penalty"]
EXTREME = st.one_of(EXTREME_INTS, st.sampled_from([float("nan"), float("inf"), -1e308, 2.0**64, -0.5]))


def _mutant(path: str) -> st.SearchStrategy:
    base, nest = VALID[path]

    def put(name: str, value) -> dict:
        body = json.loads(json.dumps(base))
        if nest and name != "logprobs":
            body[nest][{"max_tokens": "max_new_tokens"}.get(name, name)] = value
        else:
            body[name] = value
        return body
    return st.builds(put, st.sampled_from(NUMBERS), EXTREME)


def bodies(path: str) -> st.SearchStrategy:
    """One body in four: a valid body with one extreme number; else a body from the schema above."""
    return st.integers(0, 3).flatmap(lambda i: _mutant(path) if i == 0 else BODIES[path])


@pytest.fixture(scope="module")
def server():
    # 32 virtual KV tokens: a default max_tokens (chat's room, /generate's 128) stays short or is refused
    s = Server("--max-request-bytes", "65536", "--max-running-requests", "8", "--max-total-tokens", "32")
    s.http = httpx.Client(base_url=s.url, timeout=60)
    s.greedy = _greedy(s)
    yield s
    s.http.close()
    s.stop()
    _report()


def _greedy(s: Server) -> str:
    r = s.http.post("/v1/completions", json=GREEDY)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


def _check(path: str, r: httpx.Response) -> None:
    SENT[path, r.status_code] += 1
    assert r.status_code < 500, f"{path} -> {r.status_code}: {r.text[:500]}"
    if r.status_code >= 400:
        err = r.json()["error"]  # OpenAI's shape
        assert isinstance(err["message"], str) and err["message"] and isinstance(err["type"], str), err
        assert err["code"] == r.status_code, err
        return
    assert r.status_code == 200, r.text[:500]
    if r.headers["content-type"].startswith("text/event-stream"):
        events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
        assert events and events[-1] == "[DONE]", r.text[-500:]
        assert not any('"error"' in e[:12] for e in events[:-1]), r.text[-500:]  # no error after the headers
    else:
        r.json()


def _send(server: Server, path: str, body: dict) -> None:
    raw = json.dumps(body, allow_nan=True)  # ensure_ascii: lone surrogates go out as \\udXXX escapes
    _check(path, server.http.post(path, content=raw, headers={"Content-Type": "application/json"}))


def _fuzz(path: str):
    @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(body=bodies(path))
    def run(server, body):
        _send(server, path, body)
    return run


test_fuzz_completions = _fuzz("/v1/completions")
test_fuzz_chat = _fuzz("/v1/chat/completions")
test_fuzz_generate = _fuzz("/generate")

RAW = [b"", b"null", b"[]", b"42", b'"x"', b"{", b"\xff\xfe{}", b'{"prompt": "\xc3("}',
       b"[" * 50000 + b"]" * 50000, b'{"prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}",
       b'{"prompt": "Hi", "max_tokens": 1e999}', b'{"prompt": "Hi", "top_k": 99999999999999999999999999}',
       b'{"prompt": "Hi", "temperature": NaN}']


@pytest.mark.parametrize("path", list(BODIES))
def test_fixed_corpus_of_broken_bodies(server, path):
    for raw in RAW:
        _check(path, server.http.post(path, content=raw, headers={"Content-Type": "application/json"}))
    _check(path, server.http.post(path, content=b"prompt=x", headers={"Content-Type": "text/plain"}))


def test_zz_still_answers_greedy_identically(server):
    assert _greedy(server) == server.greedy
    assert server.http.get("/health").text == "ok"
    assert sum(SENT.values()) >= 2000, SENT


def _report() -> None:
    by_status = Counter()
    for (_, status), n in SENT.items():
        by_status[status] += n
    print(f"\nfuzz: {sum(SENT.values())} bodies; statuses {dict(sorted(by_status.items()))}; "
          f"per endpoint {dict(sorted(SENT.items()))}")
