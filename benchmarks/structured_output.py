"""Structured output end to end: 50 JSON-schema requests to `dcpctl launch` (the built-in model unless flags say
otherwise), every reply checked against its schema.

    python -m benchmarks.structured_output [--url URL] [--json OUT] [-- LAUNCH FLAGS...]

Without --url it starts `dcpctl launch --constrained-json-max-whitespace-cnt 2 LAUNCH FLAGS` and stops it after
(on a one-GPU machine: `-- --device cuda --tp-size 1 --dcp-size 1`).  The five schemas bound every value's length
(enums, integer ranges, maxLength, maxItems, additionalProperties false) and the server bounds whitespace, so a
reply that ends within max_tokens is guaranteed by the grammar alone: a failure is the mask's, not the model's.
The 50 requests are the five schemas through five spellings (OpenAI response_format on chat and completions,
vLLM structured_outputs, SGLang json_schema on /v1/completions and /generate), greedy and sampled, eight at once.
Exit status 1 unless all 50 are valid.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

NAME = {"type": "string", "maxLength": 12}
SCHEMAS = [
    {"type": "object", "properties": {"name": NAME, "age": {"type": "integer", "minimum": 0, "maximum": 130}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}, "ok": {"type": "boolean"}},
     "required": ["color", "ok"], "additionalProperties": False},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 6},
                                               "maxItems": 3}, "n": {"type": "integer", "minimum": -5, "maximum": 5}},
     "required": ["tags", "n"], "additionalProperties": False},
    {"type": "object", "properties": {"user": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 0,
                                                                                       "maximum": 999}, "name": NAME},
                                               "required": ["id", "name"], "additionalProperties": False},
                                      "active": {"type": "boolean"}},
     "required": ["user", "active"], "additionalProperties": False},
    {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 4},
]
MAX_TOKENS = 256
PROMPT = "Reply with JSON only.\n"


def request(i: int) -> tuple[str, dict[str, Any]]:
    """(path, body) of request i: schema i % 5, spelling (i // 5) % 5, sampled for i >= 25."""
    schema = SCHEMAS[i % 5]
    sampling = {"temperature": 0.8, "seed": i} if i >= 25 else {"temperature": 0}
    msgs = [{"role": "user", "content": PROMPT}]
    rf = {"type": "json_schema", "json_schema": {"name": f"s{i % 5}", "schema": schema, "strict": True}}
    spelling = (i // 5) % 5
    if spelling == 0:
        return "/v1/chat/completions", {"messages": msgs, "response_format": rf, "max_tokens": MAX_TOKENS} | sampling
    if spelling == 1:
        return "/v1/completions", {"prompt": PROMPT, "response_format": rf, "max_tokens": MAX_TOKENS} | sampling
    if spelling == 2:
        return "/v1/chat/completions", {"messages": msgs, "structured_outputs": {"json": schema},
                                        "max_tokens": MAX_TOKENS} | sampling
    if spelling == 3:
        return "/v1/completions", {"prompt": PROMPT, "json_schema": json.dumps(schema),
                                   "max_tokens": MAX_TOKENS} | sampling
    return "/generate", {"text": PROMPT, "sampling_params": {"json_schema": json.dumps(schema),
                                                             "max_new_tokens": MAX_TOKENS} | sampling}


def errors(doc: Any, schema: dict[str, Any], at: str = "$") -> list[str]:
    """Where `doc` breaks `schema` (the keywords SCHEMAS use; any other keyword is an error of this script)."""
    known = {"type", "properties", "required", "additionalProperties", "enum", "minimum", "maximum", "maxLength",
             "items", "minItems", "maxItems"}
    assert set(schema) <= known, set(schema) - known
    if "enum" in schema:
        return [] if doc in schema["enum"] else [f"{at}: {doc!r} not in {schema['enum']}"]
    kind = {"object": dict, "array": list, "string": str, "boolean": bool}.get(schema["type"])
    if schema["type"] == "integer":
        ok = type(doc) is int and schema.get("minimum", doc) <= doc <= schema.get("maximum", doc)
        return [] if ok else [f"{at}: {doc!r} is not an integer in range"]
    if type(doc) is not kind:
        return [f"{at}: {type(doc).__name__} where {schema['type']} was asked"]
    if kind is str:
        return [] if len(doc) <= schema.get("maxLength", len(doc)) else [f"{at}: longer than maxLength"]
    if kind is list:
        bad = [] if schema.get("minItems", 0) <= len(doc) <= schema.get("maxItems", len(doc)) else [f"{at}: items"]
        return bad + [e for j, x in enumerate(doc) for e in errors(x, schema["items"], f"{at}[{j}]")]
    if kind is dict:
        props = schema.get("properties", {})
        bad = [f"{at}: {k} missing" for k in schema.get("required", []) if k not in doc]
        bad += [f"{at}: {k} not allowed" for k in doc if k not in props and schema.get("additionalProperties") is False]
        return bad + [e for k, v in doc.items() if k in props for e in errors(v, props[k], f"{at}.{k}")]
    return []


def run_one(url: str, i: int) -> dict[str, Any]:
    path, body = request(i)
    r = httpx.post(url + path, json=body, timeout=600)
    if r.status_code != 200:
        return {"i": i, "path": path, "valid": False, "why": f"HTTP {r.status_code}: {r.text[:200]}"}
    out = r.json()
    text = out["text"] if path == "/generate" else (out["choices"][0].get("text") or
                                                    out["choices"][0].get("message", {}).get("content"))
    try:
        why = errors(json.loads(text), SCHEMAS[i % 5])
    except json.JSONDecodeError as e:
        why = [f"not JSON ({e.msg}): {text[:120]!r}"]
    return {"i": i, "path": path, "valid": not why, "why": "; ".join(why), "text": text}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="a running server (default: start one)")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("launch", nargs="*", help="flags for `dcpctl launch` (after --)")
    args = ap.parse_args(argv)
    srv = None
    url = args.url
    if url is None:
        from benchmarks.serve_launch import start
        log = Path(tempfile.gettempdir()) / "dcpctl-structured-output.log"   # the server's stderr
        srv, url = start(["--constrained-json-max-whitespace-cnt", "2", *args.launch], log)
    try:
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda i: run_one(url, i), range(50)))
    finally:
        if srv is not None:
            from benchmarks.serve_launch import stop
            stop(srv)
    valid = sum(r["valid"] for r in results)
    for r in results:
        if not r["valid"]:
            print(f"request {r['i']} ({r['path']}): {r['why']}", file=sys.stderr)
    print(json.dumps({"requests": len(results), "valid": valid, "launch": args.launch}))
    if args.json:
        args.json.write_text(json.dumps({"valid": valid, "results": results}, indent=1))
    return 0 if valid == len(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
