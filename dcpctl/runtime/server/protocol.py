"""Request bodies (pydantic) and the OpenAI-style error body.

Each body declares the parameters the server applies, with SGLang's and vLLM's meaning; every other parameter
the engines document is in params.py, accepted only at its neutral value; a name neither engine has is
ignored, as both ignore it.  A wrong type or range is a 400 whose message names the field.  Every number is
bounded here, before it reaches the engine (the control message carries int64): token counts and ids by the
model (gen.py), the rest by their fields.  Text holding a lone surrogate is a 400.
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
Count0 = Annotated[StrictInt, Field(ge=0, le=INT64_MAX)]  # SGLang's max_new_tokens: 0 answers with no new
                                                          # token
TopK = Annotated[StrictInt, Field(ge=-1, le=INT64_MAX)]   # -1 or 0: off; at or above the vocabulary: off
Prob = Annotated[float, Field(ge=0.0, le=1.0)]
Bias = Annotated[float, Field(ge=-100.0, le=100.0)]       # OpenAI's logit_bias range


def error_kind(status: int) -> str:
    """OpenAI's error type for an HTTP status: every 4xx is the client's request, every 5xx the server's."""
    return "invalid_request_error" if 400 <= status < 500 else "server_error"


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, kind: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param
        self.kind = kind or error_kind(status)


def error_response(status: int, message: str, param: str | None = None, kind: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    e = ApiError(status, message, param, kind)
    safe = e.message.encode("utf-8", "backslashreplace").decode()  # never fail to encode the error itself
    return JSONResponse({"error": {"message": safe, "type": e.kind, "param": e.param, "code": status}},
                        status_code=status, headers=headers)


def declared(body: BaseModel, name: str) -> Any:
    """A field the body's class declares (None where it does not): with extra="allow", pydantic would hand out
    an undeclared field's value too, and a route must never apply what it does not declare."""
    return getattr(body, name) if name in type(body).model_fields else None


def check_stream_options(body: "_Body") -> None:
    """stream_options only with stream: true (vLLM's 400; OpenAI documents it for streaming only)."""
    if body.stream_options and not body.stream:
        raise ApiError(400, "stream_options is only allowed with stream: true", "stream_options")


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: Optional[bool] = False
    continuous_usage_stats: Literal[False, None] = False   # usage in every chunk: not produced


class _Sampling(BaseModel):
    """What every route applies under the same names (SGLang and vLLM alike)."""

    model_config = ConfigDict(extra="allow")      # the rest is checked against params.NEUTRAL
    temperature: Optional[float] = Field(1.0, ge=0.0, le=2.0)   # null: the default (vLLM, SGLang chat)
    top_p: Optional[float] = Field(1.0, gt=0.0, le=1.0)
    top_k: Optional[TopK] = -1
    min_p: Optional[Prob] = 0.0
    stop: Stop = None
    stop_token_ids: Optional[TokenIds] = None     # finish as at EOS (gen.py checks them against the
                                                  # vocabulary)
    ignore_eos: bool = False                # EOS only: stop_token_ids still stop (vLLM's rule)
    seed: Optional[Int64] = None                  # None: rank 0 draws a fresh one (gen.sampling)
    n: Literal[1] = 1
    logit_bias: Optional[dict[str, Bias]] = None  # token id (as text) -> bias added to its logit
    skip_special_tokens: Optional[bool] = True
    no_stop_trim: bool = False              # SGLang: the matched stop string stays in the text
    regex: Optional[Text] = None                  # structured output (structured.py)
    json_schema: Union[Text, dict[str, Any], None] = None
    ebnf: Optional[Text] = None


class _Body(_Sampling):
    model: Optional[Text] = None
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    user: Optional[Text] = None                   # an end user's id for the caller's records: no effect on
                                                  # output
    request_id: Optional[Text] = None             # vLLM: the response id is cmpl- / chatcmpl- + this
    rid: Optional[Text] = None                    # SGLang: the response id
    min_tokens: Optional[Count0] = 0
    include_stop_str_in_output: bool = False   # vLLM's name for no_stop_trim
    allowed_token_ids: Optional[TokenIds] = None
    truncate_prompt_tokens: Optional[Annotated[StrictInt, Field(ge=-1, le=INT64_MAX)]] = None
    truncation_side: Optional[Literal["left", "right"]] = None
    return_token_ids: Optional[bool] = None
    return_tokens_as_token_ids: Optional[bool] = None
    response_format: Optional[dict[str, Any]] = None
    structured_outputs: Optional[dict[str, Any]] = None
    guided_json: Union[Text, dict[str, Any], None] = None     # vLLM's names before structured_outputs
    guided_regex: Optional[Text] = None
    guided_choice: Optional[list[Text]] = None
    guided_grammar: Optional[Text] = None


class CompletionRequest(_Body):
    prompt: Union[Text, TokenIds, list[Text], list[TokenIds]]
    max_tokens: Optional[Count] = 16              # null: up to the context (OpenAI, vLLM)
    logprobs: Optional[StrictInt] = Field(None, ge=0, le=1)  # 0 or 1: the chosen token's log-probability
    echo: bool = False                      # the prompt's text before the completion's
    add_special_tokens: bool = True         # false: no BOS before a text prompt (vLLM)


def _text_parts(parts: Any) -> Any:
    if isinstance(parts, list):
        for i, part in enumerate(parts):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind != "text" or not isinstance(part.get("text", ""), str):
                raise ValueError(f"part {i} is {'of type ' + repr(kind) if kind else 'not a text part'}: "
                                 "only {\"type\": \"text\", \"text\": ...} parts are supported (no images or "
                                 "audio)")
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
    max_tokens: Optional[Count] = None            # both absent: a modest default; either null: up to the
                                                  # context
    max_completion_tokens: Optional[Count] = None
    logprobs: Optional[bool] = False
    top_logprobs: Optional[StrictInt] = Field(None, ge=0, le=0)  # only the chosen token comes back
    add_generation_prompt: bool = True      # vLLM: the prompt ends with the assistant's turn header
    continue_final_message: bool = False    # vLLM, SGLang: the last (assistant) message is left open
    echo: bool = False                      # vLLM: the reply repeats the last message when it is the
                                            # assistant's
    add_special_tokens: Literal[False, None] = False   # the template brings BOS itself (vLLM's chat default)
    chat_template_kwargs: Optional[dict[str, Any]] = None   # variables for a Hugging Face chat template
    input_ids: Optional[TokenIds] = None          # SGLang: the prompt's ids; no template is applied
    return_prompt_token_ids: bool = False   # SGLang: the prompt's ids on the choice


class GenerateParams(_Sampling):
    max_new_tokens: Optional[Count0] = 128        # null: up to the context
    sampling_seed: Optional[Int64] = None         # SGLang's name for seed
    min_new_tokens: Optional[Count0] = 0          # SGLang's name for min_tokens


class GenerateRequest(BaseModel):
    """SGLang's native /generate (one prompt: text or input_ids)."""

    model_config = ConfigDict(extra="allow")
    text: Optional[Text] = None
    input_ids: Optional[TokenIds] = None
    sampling_params: GenerateParams = Field(default_factory=GenerateParams)
    stream: bool = False
    return_logprob: Optional[bool] = False
    return_text_in_logprobs: bool = False   # each output_token_logprobs entry carries its token's text
    return_prompt_token_ids: bool = False   # prompt_token_ids beside text and output_ids
    rid: Optional[Text] = None
