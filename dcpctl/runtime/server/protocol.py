"""Request bodies (pydantic) and the OpenAI-style error body.

Unknown fields are ignored, as OpenAI-compatible servers do; a wrong type or range is a 400 whose
message names the field.  Every number is bounded here, before it reaches the engine (the control
message carries int64): token counts and ids by the model (gen.py), the rest by their fields.
A parameter the engine does not implement is accepted only at its neutral value (REFUSED); any other
value is a 400 naming it, never silently ignored.  Text holding a lone surrogate is a 400.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, StrictStr

INT64_MAX = 2**63 - 1


def _no_surrogates(s: str) -> str:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"holds a lone surrogate ({s[e.start]!a}) at character {e.start}: not valid Unicode "
                         "text") from None
    return s


Text = Annotated[StrictStr, AfterValidator(_no_surrogates)]
Stop = Optional[Union[Text, list[Text]]]
TokenIds = list[StrictInt]
Int64 = Annotated[StrictInt, Field(ge=-INT64_MAX - 1, le=INT64_MAX)]
Count = Annotated[StrictInt, Field(ge=1, le=INT64_MAX)]   # token budgets (gen.check_fits bounds them further)
Count0 = Annotated[StrictInt, Field(ge=0, le=INT64_MAX)]  # SGLang's max_new_tokens: 0 answers with no new token
TopK = Annotated[StrictInt, Field(ge=-1, le=INT64_MAX)]   # -1 or 0: off; at or above the vocabulary: off

_STATUS_KIND = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "invalid_request_error"}


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, kind: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param
        self.kind = kind or _STATUS_KIND.get(status, "server_error")


def error_response(status: int, message: str, param: str | None = None, kind: str | None = None) -> JSONResponse:
    e = ApiError(status, message, param, kind)
    safe = e.message.encode("utf-8", "backslashreplace").decode()  # never fail to encode the error itself
    return JSONResponse({"error": {"message": safe, "type": e.kind, "param": e.param, "code": status}},
                        status_code=status)


# field -> the values that mean "off" (the only ones accepted: the engine has no such feature)
REFUSED: dict[str, tuple[Any, ...]] = {
    "best_of": (None, 1), "logit_bias": (None, {}), "presence_penalty": (None, 0), "frequency_penalty": (None, 0),
    "repetition_penalty": (None, 1), "min_p": (None, 0), "min_tokens": (None, 0), "suffix": (None, ""),
    "tools": (None, []), "tool_choice": (None, "none"), "functions": (None, []), "function_call": (None, "none"),
    "response_format": (None, {"type": "text"}), "audio": (None,), "modalities": (None, ["text"]),
    "web_search_options": (None,), "reasoning_effort": (None,), "verbosity": (None,), "guided_json": (None,), "guided_regex": (None,),
    "guided_choice": (None,), "guided_grammar": (None,),
    # SGLang /generate
    "min_new_tokens": (None, 0), "regex": (None,), "json_schema": (None,), "ebnf": (None,),
    "stop_token_ids": (None, []), "image_data": (None,), "lora_path": (None,), "top_logprobs_num": (None, 0),
}


def _neutral(value: Any, allowed: tuple[Any, ...]) -> bool:
    for a in allowed:
        if a is None or value is None:
            if a is value:
                return True
        elif isinstance(a, int) and type(value) in (int, float):  # 0 and 0.0 alike; a bool is not a number here
            if value == a:
                return True
        elif type(value) is type(a) and value == a:
            return True
    return False


def check_stream_options(body: "_Body") -> None:
    """stream_options only with stream: true (vLLM's 400; OpenAI documents it for streaming only)."""
    if body.stream_options and not body.stream:
        raise ApiError(400, "stream_options is only allowed with stream: true", "stream_options")


def refuse_unsupported(body: BaseModel, prefix: str = "") -> None:
    """400 naming the first field set to a value the engine cannot honour."""
    for name, allowed in REFUSED.items():
        if name in type(body).model_fields and not _neutral(getattr(body, name), allowed):
            shown = ", ".join("null" if a is None else repr(a) for a in allowed)
            raise ApiError(400, f"{prefix}{name} is not supported by this server (accepted: {shown})",
                           prefix + name)


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: Optional[Text] = None
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    stop: Stop = None
    stream: bool = False
    stream_options: Optional[dict[str, Any]] = None
    seed: Optional[Int64] = None       # None: rank 0 draws a fresh one (gen.sampling)
    n: Literal[1] = 1
    ignore_eos: bool = False  # extension (SGLang/vLLM): benchmarks want exact output lengths
    top_k: TopK = -1          # extension
    best_of: Any = None
    logit_bias: Any = None
    presence_penalty: Any = None
    frequency_penalty: Any = None
    repetition_penalty: Any = None
    min_p: Any = None
    min_tokens: Any = None
    response_format: Any = None
    guided_json: Any = None
    guided_regex: Any = None
    guided_choice: Any = None
    guided_grammar: Any = None


class CompletionRequest(_Body):
    prompt: Union[Text, TokenIds, list[Text], list[TokenIds]]
    max_tokens: Optional[Count] = 16          # null: up to the context (OpenAI, vLLM)
    logprobs: Optional[StrictInt] = Field(None, ge=0, le=1)  # 0 or 1: the chosen token's log-probability
    echo: Literal[False] = False
    suffix: Any = None


def _text_parts(parts: Any) -> Any:
    if isinstance(parts, list):
        for i, part in enumerate(parts):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind != "text" or not isinstance(part.get("text", ""), str):
                raise ValueError(f"part {i} is {'of type ' + repr(kind) if kind else 'not a text part'}: only "
                                 "{\"type\": \"text\", \"text\": ...} parts are supported (no images or audio)")
            _no_surrogates(part.get("text", ""))
    return parts


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: Annotated[Union[Text, list[dict[str, Any]], None], AfterValidator(_text_parts)] = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.get("text", "") for p in self.content)
        return self.content or ""


class ChatRequest(_Body):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: Optional[Count] = None        # both absent: a modest default; either null: up to the context
    max_completion_tokens: Optional[Count] = None
    logprobs: bool = False
    top_logprobs: Optional[StrictInt] = Field(None, ge=0, le=0)  # only the chosen token comes back
    tools: Any = None
    tool_choice: Any = None
    functions: Any = None
    function_call: Any = None
    audio: Any = None
    modalities: Any = None
    web_search_options: Any = None
    reasoning_effort: Any = None
    verbosity: Any = None


class GenerateParams(BaseModel):
    model_config = ConfigDict(extra="ignore")
    max_new_tokens: Optional[Count0] = 128     # null: up to the context
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: TopK = -1
    stop: Stop = None
    ignore_eos: bool = False
    seed: Optional[Int64] = None
    n: Literal[1] = 1
    presence_penalty: Any = None
    frequency_penalty: Any = None
    repetition_penalty: Any = None
    min_p: Any = None
    min_new_tokens: Any = None
    regex: Any = None
    json_schema: Any = None
    ebnf: Any = None
    stop_token_ids: Any = None


class GenerateRequest(BaseModel):
    """SGLang's native /generate (one prompt: text or input_ids)."""

    model_config = ConfigDict(extra="ignore")
    text: Optional[Text] = None
    input_ids: Optional[TokenIds] = None
    sampling_params: GenerateParams = Field(default_factory=GenerateParams)
    stream: bool = False
    return_logprob: bool = False
    top_logprobs_num: Any = None
    image_data: Any = None
    lora_path: Any = None
