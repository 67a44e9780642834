"""Structured output on the HTTP side: a request's constraint fields -> one llguidance grammar, checked before
submit.

    response_format (OpenAI)
        {"type": "text" | "json_object" | "json_schema", "json_schema": {"schema": ...}}
    regex, json_schema, ebnf (SGLang)
    structured_outputs (vLLM)
        {"json" | "regex" | "choice" | "grammar" | "json_object": ...,
         "disable_any_whitespace", "disable_additional_properties", "whitespace_pattern"}
    guided_json, guided_regex, guided_choice, guided_grammar (vLLM before structured_outputs)

At most one may be set (400 naming the second).  JSON allows any whitespace between its tokens (vLLM's and
SGLang's default) unless the server's --constrained-json-* flags (SGLang's: json_options, llguidance's JSON
compile options) or the request's disable_any_whitespace / whitespace_pattern say otherwise, the request's
winning.  The grammar is compiled against the checkpoint's tokenizer here, off the event loop, so a bad schema
or regex is a 400 naming its field, never an engine error.  Not supported (400): structural tags.
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable

from pydantic import BaseModel

from dcpctl.runtime import grammar as g
from dcpctl.runtime.server.protocol import ApiError, declared

_FIELDS: dict[str, Callable[[Any], str]] = {
    "regex": g.regex, "json_schema": g.json_schema, "ebnf": g.ebnf, "guided_json": g.json_schema,
    "guided_regex": g.regex, "guided_choice": g.choice, "guided_grammar": g.ebnf}
_SO_KINDS: dict[str, Callable[[Any], str]] = {"regex": g.regex, "choice": g.choice, "grammar": g.ebnf}
_SO_OPTIONS = ("disable_any_whitespace", "disable_additional_properties", "whitespace_pattern")


def requested(body: BaseModel, prefix: str = "",
              json_options: dict[str, Any] | None = None) -> tuple[str, str] | None:
    """(llguidance grammar, the parameter that set it), or None; 400 for two at once or one that does not
    compile. `json_options`: the server's JSON compile options (whitespace), under any the request gives."""
    built: list[tuple[str, str]] = []
    opts = json_options or {}
    for name, build in _FIELDS.items():
        value = declared(body, name)
        if value is not None:
            make = (lambda: g.json_schema(value, opts)) if build is g.json_schema else (lambda: build(value))
            built.append((prefix + name, _compile(make, prefix + name)))
    for name, build2 in (("response_format", _response_format), ("structured_outputs", _structured_outputs)):
        value = declared(body, name)
        grammar = (_compile(lambda: build2(value, prefix + name, opts), prefix + name)
                   if value is not None else None)
        if grammar is not None:
            built.append((prefix + name, grammar))
    if len(built) > 1:
        raise ApiError(400, f"{built[1][0]}: only one structured output constraint per request "
                            f"({built[0][0]} is set too)", built[1][0])
    return (built[0][1], built[0][0]) if built else None


def _compile(make: Callable[[], Any], param: str) -> Any:
    try:
        return make()
    except g.GrammarError as e:
        raise ApiError(400, f"{param} {e}", param) from None
    except (ValueError, TypeError, AttributeError) as e:   # llguidance on a value of the wrong shape
        raise ApiError(400, f"{param} is not a valid constraint ({type(e).__name__}: {e})", param) from None


def _response_format(rf: dict[str, Any], param: str, opts: dict[str, Any]) -> str | None:
    kind = rf.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return g.json_schema(g.ANY_OBJECT, opts)
    if kind == "json_schema":
        spec = rf.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
            raise ApiError(400,
                           f"{param}.json_schema.schema: a JSON schema object is required with type "
                           "json_schema",
                           f"{param}.json_schema.schema")
        return g.json_schema(spec["schema"], opts)
    shown = ("structural_tag is not supported by this server"
             if kind == "structural_tag" else f"{kind!r} is unknown")
    raise ApiError(400, f"{param}.type: {shown} (accepted: text, json_object, json_schema)", f"{param}.type")


def _structured_outputs(so: dict[str, Any], param: str, server: dict[str, Any]) -> str | None:
    unknown = sorted(set(so) - set(_SO_KINDS) - {"json", "json_object", "structural_tag", *_SO_OPTIONS})
    kinds = [k
             for k in ("json", "json_object", "structural_tag", *_SO_KINDS) if so.get(k) not in (None, False)]
    if unknown or len(kinds) > 1 or kinds == ["structural_tag"]:
        what = (f"{unknown[0]} is not a structured_outputs field" if unknown else
                "structural_tag is not supported by this server" if kinds == ["structural_tag"] else
                f"only one of json, json_object, regex, choice, grammar may be set ({', '.join(kinds)} are)")
        bad = unknown[0] if unknown else kinds[-1]
        raise ApiError(400, f"{param}.{bad}: {what}", f"{param}.{bad}")
    if not kinds:
        return None
    kind = kinds[0]
    if kind in _SO_KINDS:
        return _SO_KINDS[kind](so[kind])
    schema = g.ANY_OBJECT if kind == "json_object" else so["json"]
    if so.get("disable_additional_properties"):
        schema = g.closed(g.parse_schema(schema))
    # the request's own whitespace options, read as the server's flags are (grammar.json_options), else
    # the server's
    own = g.json_options(bool(so.get("disable_any_whitespace")), so.get("whitespace_pattern"))
    opts = own or dict(server)
    return g.json_schema(schema, opts)


async def check(state: Any, found: tuple[str, str] | None) -> str | None:
    """The grammar after compiling it against the served tokenizer (400 naming its field when it does not)."""
    if found is None:
        return None
    grammar, param = found
    try:
        err = await asyncio.to_thread(lambda: state.grammar_tokenizer().check(grammar))
    except g.GrammarError as e:
        raise ApiError(400, f"{param}: {e}", param) from None
    except (ValueError, TypeError) as e:
        err = f"{type(e).__name__}: {e}"
    if err:
        raise ApiError(400, f"{param} does not compile: {err.splitlines()[0]}", param)
    return grammar
