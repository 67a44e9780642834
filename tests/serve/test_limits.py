"""The server's limits and 400 details (server/limits.py, openai_api.py), on the fake engine of test_app.py.

Each detail as OpenAI, vLLM or SGLang behave: a prompt alone past the context names the prompt's own field;
a budget too large names the context and the KV capacity; null budgets mean "up to the context";
/generate's max_new_tokens 0 is allowed; stream_options without stream is a 400.
"""
import pytest

from dcpctl.contract.fields import LaunchConfigError
from dcpctl.contract.limits import ModelLimits, served_context
from tests.serve.test_app import make  # noqa: F401  (the fixture)

# make(): context 64, capacity 48 virtual tokens -> one request holds at most 49 tokens (48 KV rows + the last
# token)
MOST = 49


def _error(r, param):
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error", err
    return err["message"]


def test_models_reports_the_smaller_of_context_and_pool(make):
    client, _, _ = make()
    assert client.get("/v1/models").json()["data"][0]["max_model_len"] == MOST     # the pool binds
    client, _, _ = make(context=32)
    assert client.get("/v1/models").json()["data"][0]["max_model_len"] == 32       # the context binds


def test_the_longest_request_reported_is_served_and_one_more_is_refused(make):
    client, _, _ = make()
    r = client.post("/v1/completions", json={"prompt": [1] * 40, "max_tokens": MOST - 40})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == MOST - 40
    _error(client.post("/v1/completions", json={"prompt": [1] * 40, "max_tokens": MOST - 39}), "max_tokens")


def test_a_prompt_alone_past_the_context_names_the_prompt(make):
    client, _, _ = make(context=32)
    msg = _error(client.post("/v1/completions", json={"prompt": [1] * 40, "max_tokens": 1}), "prompt")
    assert msg.startswith("prompt (40 tokens) leaves no room for output: one request holds at most 32 tokens")
    _error(client.post("/v1/completions", json={"prompt": [1] * 32, "max_tokens": 1}), "prompt")   # none left
    _error(client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x" * 40}]}),
           "messages")
    _error(client.post("/generate", json={"input_ids": [1] * 40}), "input_ids")
    _error(client.post("/generate", json={"text": "x" * 40}), "text")


def test_max_tokens_too_large_names_the_context_and_the_kv_capacity(make):
    client, _, _ = make(context=40)
    msg = _error(client.post("/v1/completions", json={"prompt": [1] * 10, "max_tokens": 5000}), "max_tokens")
    assert msg == ("max_tokens (5000) is too large: prompt (10 tokens) + max_tokens = 5010 > 40 tokens, the "
                   "most one request holds (the context length is 40 and the KV capacity of 48 virtual "
                   "tokens holds 49); at most 30 new tokens fit this prompt")
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}],
                                                  "max_completion_tokens": 5000})
    assert "the context length is 40" in _error(r, "max_completion_tokens")
    r = client.post("/generate", json={"input_ids": [1], "sampling_params": {"max_new_tokens": 5000}})
    assert "KV capacity of 48" in _error(r, "max_new_tokens")


def test_null_budgets_run_up_to_the_context(make):
    client, _, _ = make(context=32)
    r = client.post("/v1/completions", json={"prompt": [1] * 10, "max_tokens": None}).json()
    assert r["usage"]["completion_tokens"] == 22 and r["choices"][0]["finish_reason"] == "length"
    chat = {"messages": [{"role": "user", "content": "x"}]}
    n_prompt = (client.post("/v1/chat/completions", json=chat | {"max_tokens": 1})
                .json()["usage"]["prompt_tokens"])
    for key in ("max_tokens", "max_completion_tokens"):
        r = client.post("/v1/chat/completions", json=chat | {key: None}).json()
        assert r["usage"]["completion_tokens"] == 32 - n_prompt, r
    r = client.post("/generate",
                    json={"input_ids": [1] * 10, "sampling_params": {"max_new_tokens": None}}).json()
    assert r["meta_info"]["completion_tokens"] == 22


def test_generate_max_new_tokens_zero_answers_without_the_engine(make):
    client, _, engine = make()
    r = client.post("/generate", json={"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 0}})
    assert r.status_code == 200
    body = r.json()
    assert body["text"] == "" and body["output_ids"] == [] and body["meta_info"]["prompt_tokens"] == 3
    assert (body["meta_info"]["completion_tokens"] == 0
            and body["meta_info"]["finish_reason"] == {"type": "length"})
    r = client.post("/generate",
                    json={"input_ids": [1], "stream": True, "sampling_params": {"max_new_tokens": 0}})
    assert r.status_code == 200 and '"output_ids": []' in r.text and r.text.endswith("data: [DONE]\n\n")
    assert not engine.live and not engine.cancelled
    _error(client.post("/generate", json={"input_ids": [1], "sampling_params": {"max_new_tokens": -1}}),
           "sampling_params")
    # OpenAI: >= 1
    _error(client.post("/v1/completions", json={"prompt": "x", "max_tokens": 0}), "max_tokens")


def test_stream_options_need_stream(make):
    client, _, _ = make()
    for path, body in (("/v1/completions", {"prompt": "x", "max_tokens": 2}),
                       ("/v1/chat/completions",
                        {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2})):
        r = client.post(path, json=body | {"stream_options": {"include_usage": True}})
        assert "only allowed with stream: true" in _error(r, "stream_options")
        r = client.post(path, json=body | {"stream_options": {"include_usage": True}, "stream": True})
        assert r.status_code == 200 and '"usage"' in r.text
        assert client.post(path, json=body | {"stream_options": None}).status_code == 200



def test_served_context_is_the_flag_within_the_model():
    model = ModelLimits(100, 2048, ())
    assert served_context(model, None) == 2048 and served_context(model, 512) == 512
    with pytest.raises(LaunchConfigError, match=r"context_length \(4096\) must be within 1\.\.the model's "
                                                r"max_position_embeddings \(2048\)"):
        served_context(model, 4096)
