"""The server's length limits, from one source, and the 400s that name them.

    context   --context-length (SGLang's name; --context-len too), else the model's max_position_embeddings
    capacity  virtual KV tokens of one replica; a request writes prompt + max_new - 1 (+ draft) rows (fits.py)
    max_model_len = min(context, capacity + 1 - kv_extra)    what /v1/models reports: the longest request
                                                             served

A prompt must leave room for one new token (prompt < max_model_len, as vLLM and SGLang refuse a prompt
at the context length); the message then names the prompt's own parameter.  A budget too large for the
prompt names the context and the KV capacity both, and how many new tokens would fit.
"""
from __future__ import annotations

from dataclasses import dataclass

from dcpctl.runtime.fits import max_total
from dcpctl.runtime.server.protocol import ApiError


@dataclass(frozen=True)
class ServerLimits:
    context: int        # tokens of prompt + output the server allows
    capacity: int       # virtual KV tokens of one replica
    kv_extra: int = 0   # rows a request writes past plain decode (speculative: num_draft_tokens)

    @property
    def max_model_len(self) -> int:
        return max_total(self.capacity, self.context, self.kv_extra)

    def _why(self) -> str:
        held = self.capacity + 1 - self.kv_extra
        draft = f" with num_draft_tokens ({self.kv_extra})" if self.kv_extra else ""
        return (f"the context length is {self.context} and the KV capacity of {self.capacity} virtual tokens "
                f"holds {held}{draft}")

    def check_prompt(self, n_prompt: int, param: str) -> None:
        """400 naming `param` (the prompt's field) when the prompt alone leaves no room for a new token."""
        if n_prompt >= self.max_model_len:
            raise ApiError(400, f"{param} ({n_prompt} tokens) leaves no room for output: one request holds "
                                f"at most {self.max_model_len} tokens ({self._why()})", param)

    def room(self, n_prompt: int) -> int:
        """The most new tokens a prompt of `n_prompt` tokens may ask for (check_prompt first: at least 1)."""
        return self.max_model_len - n_prompt

    def check_budget(self, n_prompt: int, max_new: int, param: str) -> None:
        """400 naming `param` when prompt + max_new passes max_model_len; names both limits and the room
        left."""
        if n_prompt + max_new > self.max_model_len:
            raise ApiError(400, f"{param} ({max_new}) is too large: prompt ({n_prompt} tokens) + {param} = "
                                f"{n_prompt + max_new} > {self.max_model_len} tokens, the most one request "
                                f"holds ({self._why()}); at most {self.room(n_prompt)} new tokens fit this "
                                "prompt", param)
