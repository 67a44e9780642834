"""Structured output through llguidance (the grammar library vLLM and SGLang offer as their `guidance` backend).

    json_schema(schema) / regex(rx) / lark(text) / ebnf(gbnf) / choice(strings) -> grammar   one llguidance grammar
    GrammarTokenizer(model_path, eos_ids, vocab_size)   the checkpoint's tokenizer as llguidance sees it
        .check(grammar) -> None or the error message (the HTTP side answers 400 with it)
        .matcher(grammar) -> llguidance.LLMatcher   (engine/rules.py masks the logits with it, one per request)

A grammar is a string (llguidance's JSON form), so it crosses the control message as text and every rank of a
replica builds the same matcher from it.  The tokenizer comes from the checkpoint's tokenizer.json (the built-in
model writes one; no transformers needed), else from transformers' fast tokenizer.  llguidance is a small
self-contained wheel with no dependencies, hence a required dependency.  Torch-free: the HTTP processes import it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import llguidance

ANY_OBJECT = {"type": "object"}     # response_format json_object: any JSON object (vLLM and SGLang alike)


def json_options(disable_any_whitespace: bool = False, whitespace_pattern: str | None = None,
                 max_whitespace_cnt: int | None = None) -> dict[str, Any]:
    """llguidance's JSON compile options from SGLang's --constrained-json-* flags (none: any whitespace)."""
    if disable_any_whitespace:
        return {"whitespace_flexible": False}
    if whitespace_pattern is not None:
        return {"whitespace_pattern": whitespace_pattern}
    if max_whitespace_cnt is not None:
        return {"whitespace_pattern": f"[ \\t\\n\\r]{{0,{max_whitespace_cnt}}}"}
    return {}


class GrammarError(ValueError):
    """A grammar, schema or regex that llguidance cannot compile; the message says where."""


def parse_schema(schema: Any) -> dict[str, Any]:
    """A JSON schema object from a dict or its JSON text (SGLang's json_schema field carries text)."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise GrammarError(f"is not valid JSON ({e.msg} at character {e.pos})") from None
    if not isinstance(schema, dict):
        raise GrammarError(f"must be a JSON schema object, got {type(schema).__name__}")
    return schema


def closed(schema: Any) -> Any:
    """The schema with additionalProperties false on every object schema that does not set it (vLLM's
    disable_additional_properties)."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: closed(v) for k, v in schema.items()}
    if (out.get("type") == "object" or "properties" in out) and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def json_schema(schema: Any, options: dict[str, Any] | None = None) -> str:
    """A JSON schema; `options` are llguidance's JSON compile options (whitespace_flexible, whitespace_pattern)."""
    return llguidance.LLMatcher.grammar_from_json_schema(parse_schema(schema), defaults=options or None)


def regex(rx: str) -> str:
    return llguidance.LLMatcher.grammar_from_regex(rx)


def lark(text: str) -> str:
    return llguidance.LLMatcher.grammar_from_lark(text)


def ebnf(text: str) -> str:
    """GBNF/EBNF (`root ::= ...`, SGLang's ebnf and vLLM's grammar); a Lark grammar (`start: ...`) passes as is."""
    if "::=" not in text:
        return lark(text)
    from llguidance.gbnf_to_lark import gbnf_to_lark
    try:
        return lark(gbnf_to_lark(text))
    except Exception as e:  # noqa: BLE001 - the converter raises plain exceptions on bad input
        raise GrammarError(f"is not a valid EBNF grammar: {e}") from None


def choice(options: list[str]) -> str:
    """Exactly one of `options` (vLLM's choice): a Lark alternation of JSON-escaped literals."""
    if not options or not all(isinstance(o, str) for o in options):
        raise GrammarError("must be a non-empty list of strings")
    return lark("start: " + " | ".join(json.dumps(o) for o in options))


class GrammarTokenizer:
    """The checkpoint's tokenizer for llguidance, built once (about a second for a 128K vocabulary)."""

    def __init__(self, model_path: str | Path, eos_ids: list[int], vocab_size: int) -> None:
        self.tok = _load(Path(model_path), eos_ids, vocab_size)

    def check(self, grammar: str) -> str | None:
        """None when the grammar compiles against this tokenizer, else llguidance's message (first line kept)."""
        err = llguidance.LLMatcher.validate_grammar(grammar, self.tok)
        return err.strip() or None

    def matcher(self, grammar: str) -> llguidance.LLMatcher:
        return llguidance.LLMatcher(self.tok, grammar, log_level=0)


def _load(path: Path, eos_ids: list[int], vocab_size: int) -> llguidance.LLTokenizer:
    eos = list(eos_ids) or None
    spec = path / "tokenizer.json"
    if spec.is_file():
        text = spec.read_text()
        n_vocab = max(vocab_size, _vocab_of(text))
        return llguidance.LLTokenizer(text, n_vocab=n_vocab, eos_token=eos)
    try:
        from llguidance.hf import from_tokenizer
        from transformers import AutoTokenizer
        hf = AutoTokenizer.from_pretrained(str(path))
        return from_tokenizer(hf, n_vocab=max(vocab_size, len(hf)), eos_token=eos)
    except Exception as e:  # noqa: BLE001 - any failure becomes one sentence for the 400
        raise GrammarError(f"structured output needs the checkpoint's tokenizer.json or a fast Hugging Face "
                           f"tokenizer in {path}: {e}") from None


def _vocab_of(tokenizer_json: str) -> int:
    # a BPE/WordPiece vocab maps piece -> id; a Unigram one is a list of [piece, score] in id order
    data = json.loads(tokenizer_json)
    vocab = data.get("model", {}).get("vocab", {})
    ids = list(vocab.values()) if isinstance(vocab, dict) else list(range(len(vocab)))
    return max(ids + [t["id"] for t in data.get("added_tokens", [])], default=-1) + 1
