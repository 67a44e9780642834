"""An HTTP client for the parameter checks (test_parameters.py, param_probes.py): one body per route, greedy
by default, the reply reduced to text, token ids and finish reason.

    route "completions", "chat", "generate" (/generate's own fields), "sampling_params" (the fields inside it)
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

PROMPT = "def add(a, b):"
PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions", "generate": "/generate",
         "sampling_params": "/generate"}
MAX = {"completions": "max_tokens", "chat": "max_tokens", "generate": "max_new_tokens",
       "sampling_params": "max_new_tokens"}


@dataclass
class Out:
    text: str
    ids: list[int]
    finish: str
    raw: dict[str, Any]


class Client:
    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=120)

    def body(self, route: str, budget: int = 6, **extra: Any) -> dict[str, Any]:
        sampling = {"temperature": 0, MAX[route]: budget}
        if route in ("generate", "sampling_params"):
            inner = {k: v for k, v in extra.items() if route == "sampling_params"}
            outer = {k: v for k, v in extra.items() if route == "generate"}
            return {"text": PROMPT, "sampling_params": sampling | inner} | outer
        first = ({"prompt": PROMPT}
                 if route == "completions" else {"messages": [{"role": "user", "content": PROMPT}]})
        return first | sampling | {"return_token_ids": True} | extra

    def post(self, route: str, body: dict[str, Any], status: int = 200) -> dict[str, Any]:
        r = self.http.post(PATHS[route], json=body)
        assert r.status_code == status, (route, body, r.text)
        return r.json()

    def out(self, route: str, budget: int = 6, **extra: Any) -> Out:
        raw = self.post(route, self.body(route, budget, **extra))
        if route in ("generate", "sampling_params"):
            return Out(raw["text"], raw["output_ids"], raw["meta_info"]["finish_reason"]["type"], raw)
        c = raw["choices"][0]
        text = c["text"] if route == "completions" else c["message"]["content"]
        return Out(text, c.get("token_ids", []), c["finish_reason"], raw)

    def stream(self, route: str, budget: int = 6, **extra: Any) -> list[Any]:
        events = []
        with self.http.stream("POST", PATHS[route], json=self.body(route, budget, stream=True, **extra)) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    events.append(json.loads(line[6:]))
        return events
