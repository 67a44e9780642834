"""Request bodies (pydantic) and the OpenAI-style error body.

Unknown fields are ignored, as OpenAI-compatible servers do; a wrong type or range is a 400 whose
message names the field.  Only the features the engine has are accepted (n = 1, no echo).
"""
from __future__ import annotations

from typing import Any, Literal, Optional, Union

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

Stop = Optional[Union[StrictStr, list[StrictStr]]]
TokenIds = list[StrictInt]


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, kind: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param
        self.kind = kind or {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                             413: "invalid_request_error"}.get(status, "server_error")


def error_response(status: int, message: str, param: str | None = None, kind: str | None = None) -> JSONResponse:
    e = ApiError(status, message, param, kind)
    return JSONResponse({"error": {"message": e.message, "type": e.kind, "param": e.param, "code": status}},
                        status_code=status)


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: Optional[str] = None
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    stop: Stop = None
    stream: bool = False
    stream_options: Optional[dict[str, Any]] = None
    seed: Optional[StrictInt] = Field(None, ge=0, le=2**62)
    n: Literal[1] = 1
    ignore_eos: bool = False  # extension (SGLang/vLLM): benchmarks want exact output lengths
    top_k: StrictInt = -1     # extension


class CompletionRequest(_Body):
    prompt: Union[StrictStr, TokenIds, list[StrictStr], list[TokenIds]]
    max_tokens: StrictInt = Field(16, ge=1)
    logprobs: Optional[StrictInt] = Field(None, ge=0, le=5)
    echo: Literal[False] = False


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: Union[StrictStr, list[dict[str, Any]], None] = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")
        return self.content or ""


class ChatRequest(_Body):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: Optional[StrictInt] = Field(None, ge=1)
    max_completion_tokens: Optional[StrictInt] = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: Optional[StrictInt] = Field(None, ge=0, le=5)


class GenerateParams(BaseModel):
    model_config = ConfigDict(extra="ignore")
    max_new_tokens: StrictInt = Field(128, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: StrictInt = -1
    stop: Stop = None
    ignore_eos: bool = False
    seed: Optional[StrictInt] = Field(None, ge=0, le=2**62)


class GenerateRequest(BaseModel):
    """SGLang's native /generate (one prompt: text or input_ids)."""

    model_config = ConfigDict(extra="ignore")
    text: Optional[StrictStr] = None
    input_ids: Optional[TokenIds] = None
    sampling_params: GenerateParams = Field(default_factory=GenerateParams)
    stream: bool = False
    return_logprob: bool = False
