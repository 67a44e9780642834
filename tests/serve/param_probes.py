"""What each applied parameter must do, checked through HTTP on the built-in model (test_parameters.py runs
them).

A probe takes the client and a route ("completions", "chat", "generate" for /generate's own fields,
"sampling_params" for the fields inside it) and asserts the parameter's effect, as SGLang and vLLM define it.
Requests are greedy unless the probe says otherwise; the byte tokenizer makes ids and text easy to compare.
"""
from __future__ import annotations

import json
import re
from typing import Any, Callable

from tests.serve.param_client import PROMPT, Client, Out

EOS, BOS = 257, 256


def _same_as_greedy(c: Client, route: str, **extra: Any) -> None:
    """A filter that leaves only the most likely token makes sampling greedy."""
    assert c.out(route, temperature=1.0, **extra).ids == c.out(route).ids


def temperature(c: Client, r: str) -> None:
    got = {tuple(c.out(r, 8, temperature=1.5, **{_seed(r): s}).ids) for s in range(4)}
    assert len(got) > 1 and c.out(r).ids == c.out(r, temperature=0).ids


def _seed(r: str) -> str:
    return "sampling_seed" if r == "sampling_params" else "seed"


def seed(c: Client, r: str) -> None:
    a, b = (c.out(r, 8, temperature=1.0, **{_seed(r): 11}).ids for _ in range(2))
    assert a == b


def stop(c: Client, r: str, keep: str | None = None) -> None:
    greedy = c.out(r, 12).text
    s = greedy[3:5]
    got = c.out(r, 12, stop=[s], **({keep: True} if keep else {}))
    assert got.finish == "stop" and got.text == greedy[:greedy.index(s)
                                                       + (len(s) if keep else 0)], (greedy, got)


def stop_token_ids(c: Client, r: str) -> None:
    ids = c.out(r, 10).ids
    i = ids.index(ids[3])
    got = c.out(r, 10, stop_token_ids=[ids[3]])
    assert got.ids == ids[:i + 1] and got.finish == "stop" and got.text == bytes(ids[:i]).decode()


def logit_bias(c: Client, r: str) -> None:
    assert set(c.out(r, logit_bias={"122": 100}).ids) == {122}


def ignore_eos(c: Client, r: str) -> None:
    assert c.out(r, logit_bias={str(EOS): 100}).ids == [EOS]
    got = c.out(r, 5, logit_bias={str(EOS): 100}, ignore_eos=True)
    assert got.ids == [EOS] * 5 and got.finish == "length"


def skip_special_tokens(c: Client, r: str) -> None:
    assert c.out(r, 3, logit_bias={str(BOS): 100}).text == ""
    assert c.out(r, 3, logit_bias={str(BOS): 100}, skip_special_tokens=False).text == "<|bos|>" * 3


def min_tokens(c: Client, r: str, name: str = "min_tokens") -> None:
    got = c.out(r, 8, logit_bias={str(EOS): 100}, **{name: 3})
    assert len(got.ids) == 4 and got.ids[-1] == EOS and EOS not in got.ids[:3]


def allowed_token_ids(c: Client, r: str) -> None:
    assert set(c.out(r, allowed_token_ids=[97, 98]).ids) <= {97, 98}


def regex(c: Client, r: str) -> None:
    got = c.out(r, 8, regex=r"[0-9]{3}-(ab|cd)")
    assert re.fullmatch(r"[0-9]{3}-(ab|cd)", got.text) and got.finish == "stop", got


SCHEMA = {"type": "object", "properties": {"k": {"enum": ["x", "y"]}, "n": {"type": "integer", "minimum": 0,
                                                                           "maximum": 9}},
          "required": ["k", "n"], "additionalProperties": False}


def _json_ok(got: Out) -> None:
    doc = json.loads(got.text)
    assert got.finish == "stop" and doc["k"] in ("x", "y") and 0 <= doc["n"] <= 9, got


def json_schema(c: Client, r: str) -> None:
    _json_ok(c.out(r, 40, json_schema=json.dumps(SCHEMA)))


def ebnf(c: Client, r: str) -> None:
    got = c.out(r, 8, ebnf='root ::= "ab" [0-9] [0-9]')
    assert re.fullmatch(r"ab[0-9]{2}", got.text), got


def response_format(c: Client, r: str) -> None:
    _json_ok(c.out(r, 40,
                   response_format={"type": "json_schema", "json_schema": {"name": "t", "schema": SCHEMA}}))
    assert c.out(r, 4, response_format={"type": "json_object"}).text.startswith("{")
    assert c.out(r, response_format={"type": "text"}).ids == c.out(r).ids


def structured_outputs(c: Client, r: str) -> None:
    assert c.out(r, 8, structured_outputs={"choice": ["red", "blue"]}).text in ("red", "blue")
    _json_ok(c.out(r, 40, structured_outputs={"json": SCHEMA, "disable_any_whitespace": True}))


def stream(c: Client, r: str) -> None:
    ev = c.stream(r, **({"stream_options": {"include_usage": True}} if r in ("completions", "chat") else {}))
    if r == "generate":
        assert ev[-1]["output_ids"] == c.out(r).ids
        return
    assert ev[-1]["usage"]["completion_tokens"] == 6 and ev[-1]["choices"] == []
    key = "text" if r == "completions" else "content"
    text = "".join((e["choices"][0].get("delta", e["choices"][0])).get(key) or "" for e in ev[:-1])
    assert text == c.out(r).text


def ids_of(c: Client, r: str, **extra: Any) -> dict[str, Any]:
    raw = c.out(r, **extra).raw
    return raw if r in ("generate", "sampling_params") else raw["choices"][0]


def identity(c: Client, r: str, name: str, value: Any) -> None:
    """A parameter whose documented effect is on something other than the output (a caller's record)."""
    assert c.out(r, **{name: value}).ids == c.out(r).ids


def request_id(c: Client, r: str) -> None:
    prefix = "cmpl" if r == "completions" else "chatcmpl"
    assert c.out(r, request_id="abc").raw["id"] == f"{prefix}-abc"


def rid(c: Client, r: str) -> None:
    raw = c.out(r, rid="my-rid").raw
    assert (raw["meta_info"]["id"] if r == "generate" else raw["id"]) == "my-rid"


def truncate_prompt_tokens(c: Client, r: str) -> None:
    left = ids_of(c, r, truncate_prompt_tokens=3)["prompt_token_ids"]
    right = ids_of(c, r, truncate_prompt_tokens=3, truncation_side="right")["prompt_token_ids"]
    full = ids_of(c, r)["prompt_token_ids"]
    assert left == full[-3:] and right == full[:3]


def return_token_ids(c: Client, r: str) -> None:
    choice = ids_of(c, r)
    assert bytes(choice["token_ids"]).decode() == (choice.get("text") or choice["message"]["content"])
    assert choice["prompt_token_ids"][0] == BOS and len(choice["prompt_token_ids"]) > len(PROMPT)


def logprobs(c: Client, r: str) -> None:
    choice = c.out(r, logprobs=1 if r == "completions" else True).raw["choices"][0]
    table = choice["logprobs"]["token_logprobs"] if r == "completions" else choice["logprobs"]["content"]
    assert len(table) == len(choice["token_ids"])


def return_tokens_as_token_ids(c: Client, r: str) -> None:
    choice = c.out(r, logprobs=1 if r == "completions" else True,
                   return_tokens_as_token_ids=True).raw["choices"][0]
    names = (choice["logprobs"]["tokens"] if r == "completions" else
             [t["token"] for t in choice["logprobs"]["content"]])
    assert names == [f"token_id:{t}" for t in choice["token_ids"]]


def top_logprobs(c: Client, r: str) -> None:
    c.out(r, logprobs=True, top_logprobs=0)
    c.post(r, c.body(r, logprobs=True, top_logprobs=2), 400)


def echo(c: Client, r: str) -> None:
    if r == "completions":
        assert c.out(r, echo=True).text == PROMPT + c.out(r).text
        return
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure: "}]
    got = c.out(r, messages=msgs, echo=True, add_generation_prompt=False, continue_final_message=True)
    assert got.text.startswith("Sure: ") and len(got.text) > len("Sure: ")


def add_special_tokens(c: Client, r: str) -> None:
    if r == "chat":     # the template brings BOS (vLLM's chat default, false); a second one is refused
        assert ids_of(c, r, add_special_tokens=False)["prompt_token_ids"] == ids_of(c, r)["prompt_token_ids"]
        c.post(r, c.body(r, add_special_tokens=True), 400)
        return
    assert ids_of(c, r, add_special_tokens=False)["prompt_token_ids"] == ids_of(c, r)["prompt_token_ids"][1:]


def max_tokens(c: Client, r: str, name: str) -> None:
    got = c.out(r, **{name: 3})
    assert len(got.ids) == 3 and got.finish == "length"


def add_generation_prompt(c: Client, r: str) -> None:
    with_header = ids_of(c, r)["prompt_token_ids"]
    assert (ids_of(c, r, add_generation_prompt=False)["prompt_token_ids"]
            == with_header[:-len(b"<|assistant|>\n")])


def continue_final_message(c: Client, r: str) -> None:
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x ="}]
    prompt = ids_of(c, r, messages=msgs, add_generation_prompt=False,
                    continue_final_message=True)["prompt_token_ids"]
    assert bytes(prompt[-len("x ="):]) == b"x ="
    # with add_generation_prompt: vLLM's 400
    c.post(r, c.body(r, messages=msgs, continue_final_message=True), 400)


def chat_template_kwargs(c: Client, r: str) -> None:
    identity(c, r, "chat_template_kwargs", {"enable_thinking": False})   # the plain template has no variables


def input_ids(c: Client, r: str) -> None:
    ids = [BOS, *b"x = "]
    raw = c.post(r, {"input_ids": ids, "sampling_params": {"max_new_tokens": 2}} if r == "generate" else
                 c.body(r, input_ids=ids))
    assert (raw["meta_info"]["prompt_tokens"]
            if r == "generate" else raw["usage"]["prompt_tokens"]) == len(ids)


def return_prompt_token_ids(c: Client, r: str) -> None:
    got = ids_of(c, r, return_prompt_token_ids=True,
                 **({} if r == "generate" else {"return_token_ids": False}))
    assert got["prompt_token_ids"][0] == BOS


def model(c: Client, r: str) -> None:
    c.post(r, c.body(r, model="gpt-x"), 404)
    c.out(r, model=c.http.get("/v1/models").json()["data"][0]["id"])


def n(c: Client, r: str) -> None:
    c.out(r, n=1)
    c.post(r, c.body(r, n=2), 400)


def return_logprob(c: Client, r: str) -> None:
    raw = c.out(r, return_logprob=True).raw
    assert [t for _, t, _ in raw["meta_info"]["output_token_logprobs"]] == raw["output_ids"]


def return_text_in_logprobs(c: Client, r: str) -> None:
    raw = c.out(r, return_logprob=True, return_text_in_logprobs=True).raw
    assert "".join(t for _, _, t in raw["meta_info"]["output_token_logprobs"]) == raw["text"]


def _always(c: Client, r: str) -> None:
    """prompt, messages, text, sampling_params, stream_options' route: every other probe sends them."""
    assert c.out(r).ids


PROBES: dict[str, Callable[[Client, str], None]] = {
    "temperature": temperature, "seed": seed, "sampling_seed": seed, "stop": stop,
    "stop_token_ids": stop_token_ids, "no_stop_trim": lambda c, r: stop(c, r, "no_stop_trim"),
    "include_stop_str_in_output": lambda c, r: stop(c, r, "include_stop_str_in_output"),
    "top_p": lambda c, r: _same_as_greedy(c, r, top_p=1e-9),
    "top_k": lambda c, r: _same_as_greedy(c, r, top_k=1),
    "min_p": lambda c, r: _same_as_greedy(c, r, min_p=1.0), "logit_bias": logit_bias,
    "ignore_eos": ignore_eos, "skip_special_tokens": skip_special_tokens, "min_tokens": min_tokens,
    "min_new_tokens": lambda c, r: min_tokens(c, r, "min_new_tokens"), "allowed_token_ids": allowed_token_ids,
    "regex": regex, "json_schema": json_schema, "ebnf": ebnf, "response_format": response_format,
    "structured_outputs": structured_outputs, "stream": stream, "stream_options": stream,
    "user": lambda c, r: identity(c, r, "user", "someone"), "request_id": request_id, "rid": rid,
    "truncate_prompt_tokens": truncate_prompt_tokens, "truncation_side": truncate_prompt_tokens,
    "return_token_ids": return_token_ids, "return_tokens_as_token_ids": return_tokens_as_token_ids,
    "logprobs": logprobs, "top_logprobs": top_logprobs, "echo": echo,
    "add_special_tokens": add_special_tokens, "max_tokens": lambda c, r: max_tokens(c, r, "max_tokens"),
    "max_completion_tokens": lambda c, r: max_tokens(c, r, "max_completion_tokens"),
    "max_new_tokens": lambda c, r: max_tokens(c, r, "max_new_tokens"),
    "add_generation_prompt": add_generation_prompt, "continue_final_message": continue_final_message,
    "chat_template_kwargs": chat_template_kwargs, "input_ids": input_ids,
    "return_prompt_token_ids": return_prompt_token_ids, "model": model, "n": n,
    "return_logprob": return_logprob, "return_text_in_logprobs": return_text_in_logprobs, "prompt": _always,
    "messages": _always, "text": _always, "sampling_params": _always,
}
