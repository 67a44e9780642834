"""Every request parameter SGLang 0.5.23 and vLLM 0.34.0 document (tests/serve/engine_params.py, read from
their protocol classes) sent to `dcpctl launch` on the built-in model: each is applied with the engines'
meaning (a probe in param_probes.py checks its effect) or refused with a 400 naming it at any value but its
neutral ones (params.py), on /v1/completions, /v1/chat/completions and /generate alike; none is silently
ignored."""
import json

import pytest

from dcpctl.runtime.server.params import NEUTRAL
from dcpctl.runtime.server.protocol import ChatRequest, CompletionRequest, GenerateParams, GenerateRequest
from tests.serve import engine_params as E
from tests.serve.param_client import Client
from tests.serve.param_probes import PROBES
from tests.serve.server import Server

ROUTES = {  # route -> (its body, the parameters the engines document for it)
    "completions": (CompletionRequest, E.SGLANG_COMPLETIONS + E.VLLM_COMPLETIONS),
    "chat": (ChatRequest, E.SGLANG_CHAT + E.VLLM_CHAT),
    "generate": (GenerateRequest, E.SGLANG_GENERATE),
    "sampling_params": (GenerateParams, E.SGLANG_SAMPLING_PARAMS),
}
CASES = sorted({(route, name) for route, (_, names) in ROUTES.items() for name in names})


@pytest.fixture(scope="module")
def client():
    # float64 for exact greedy repeats; JSON whitespace bounded so that a bounded schema ends within
    # max_tokens
    s = Server("--dtype", "float64", "--max-total-tokens", "4096", "--constrained-json-max-whitespace-cnt",
               "1")
    yield Client(s.url)
    s.stop()


def test_every_documented_parameter_is_applied_or_refused():
    """Structural: a documented name is a field of its route's body (applied, with a probe) or in NEUTRAL."""
    unhandled = [(r, n) for r, n in CASES if n not in ROUTES[r][0].model_fields and n not in NEUTRAL]
    unprobed = sorted({n for r, n in CASES if n in ROUTES[r][0].model_fields} - set(PROBES))
    assert unhandled == [] and unprobed == []


def _offending(accepted: tuple) -> object:
    """A value outside `accepted` of the kind the parameter takes."""
    for value in (True, 7, "x"):
        if not any(type(a) is type(value) and a == value for a in accepted):
            return value
    raise AssertionError(accepted)


@pytest.mark.parametrize("route,name",
                         [c for c in CASES if c[1] in NEUTRAL and c[1] not in ROUTES[c[0]][0].model_fields])
def test_a_refused_parameter_is_a_400_naming_it(client, route, name):
    prefix = "sampling_params." if route == "sampling_params" else ""
    err = client.post(route, client.body(route, **{name: _offending(NEUTRAL[name])}), 400)["error"]
    assert err["param"] == prefix + name and name in err["message"] and err["type"] == "invalid_request_error"


@pytest.mark.parametrize("route", list(ROUTES))
def test_every_refused_parameter_at_its_neutral_value_is_served(client, route):
    names = {n for n in ROUTES[route][1] if n in NEUTRAL and n not in ROUTES[route][0].model_fields}
    neutral = {n: NEUTRAL[n][-1] for n in names}      # the last listed: the engines' default where it is not
                                                      # null
    assert client.out(route, **neutral).ids == client.out(route).ids


@pytest.mark.parametrize("route,name", [c for c in CASES if c[1] in ROUTES[c[0]][0].model_fields])
def test_an_applied_parameter_does_what_the_engines_say(client, route, name):
    PROBES[name](client, route)


def test_the_routes_agree_on_sampling_parameters(client):
    """One request's sampling parameters give the same tokens on every route (the prompt as ids)."""
    ids = [256, *b"def f("]
    params = {"temperature": 0.9, "top_k": 20, "top_p": 0.9, "min_p": 0.05, "seed": 3, "stop_token_ids": [41],
              "logit_bias": {"120": 2.0}, "min_tokens": 2}
    cmpl = client.post("completions", {"prompt": ids, "max_tokens": 8, "return_token_ids": True} | params)
    chat = client.post("chat",
                       {"messages": [{"role": "user", "content": "x"}], "input_ids": ids, "max_tokens": 8,
                        "return_token_ids": True} | params)
    gen = client.post("generate",
                      {"input_ids": ids, "sampling_params": {"max_new_tokens": 8, "min_new_tokens": 2} |
                       {k: v for k, v in params.items() if k != "min_tokens"}})
    assert cmpl["choices"][0]["token_ids"] == chat["choices"][0]["token_ids"] == gen["output_ids"]


def test_a_bad_grammar_is_a_400_naming_its_field(client):
    for route, extra, param in [("completions", {"regex": "[0-9"}, "regex"),
                                ("chat", {"response_format": {"type": "json_schema", "json_schema": {}}},
                                 "response_format.json_schema.schema"),
                                ("sampling_params", {"json_schema": "{not json"},
                                 "sampling_params.json_schema"),
                                ("chat", {"regex": "a", "ebnf": 'root ::= "a"'}, "ebnf"),
                                ("completions", {"structured_outputs": {"json": {}, "regex": "a"}},
                                 "structured_outputs.regex")]:
        err = client.post(route, client.body(route, **extra), 400)["error"]
        assert err["param"] == param, (extra, err)
    assert json.loads(client.out("chat", 30, guided_json=E_SCHEMA).text)["k"] in ("x", "y")


E_SCHEMA = {"type": "object", "properties": {"k": {"enum": ["x", "y"]}}, "required": ["k"],
            "additionalProperties": False}


def test_structured_output_streams_as_it_answers(client):
    for route, extra in [("completions", {"regex": r"[0-9]{3}-(ab|cd)"}),
                         ("chat", {"response_format": {"type": "json_schema",
                                                       "json_schema": {"name": "e", "schema": E_SCHEMA}}})]:
        events = client.stream(route, budget=30, **extra)
        key = "text" if route == "completions" else "content"
        text = "".join(e["choices"][0].get("delta", e["choices"][0]).get(key) or ""
                       for e in events if e["choices"])
        assert (text == client.out(route, 30, **extra).text
                and events[-1]["choices"][0]["finish_reason"] == "stop")
