"""Does a request fit: the KV rows it writes against the KV capacity, its length against the model's
positions.

One rule for the scheduler (engine/request.py `Sequence.max_kv`, engine/scheduler.py), the server
(server/gen.py) and `dcpctl generate` (cli/generate.py); torch-free, so the CLI checks before any
rank starts, and the server never accepts a request that the scheduler would then refuse.

    kv_rows(prompt, max_new, extra) = prompt + max_new - 1 + extra
        the last sampled token is never fed back, so its row is never written; speculative
        verification writes `extra` (num_draft_tokens) rows past plain decode
    positions: prompt + max_new <= max_position_embeddings (the model's context length)
    max_total(capacity, context, extra) = min(context, capacity + 1 - extra)
        the longest prompt + output one request may reach: what the server reports as max_model_len
"""
from __future__ import annotations

from dataclasses import dataclass


def kv_rows(prompt: int, max_new: int, extra: int = 0) -> int:
    """KV rows (virtual tokens) a request of `prompt` tokens and `max_new` new ones writes at most."""
    return prompt + max_new - 1 + extra


@dataclass(frozen=True)
class Misfit:
    """The first limit a request breaks, with every term of the sum."""

    limit: str        # "capacity" or "positions"
    prompt: int
    max_new: int
    extra: int
    need: int
    have: int

    def sentence(self, param: str = "max_new_tokens") -> str:
        head = f"prompt ({self.prompt} tokens) + {param} ({self.max_new})"
        if self.limit == "positions":
            return f"{head} = {self.need} exceeds the model's max_position_embeddings ({self.have})"
        spec = f" + num_draft_tokens ({self.extra})" if self.extra else ""
        return f"{head} - 1{spec} = {self.need} KV rows exceeds the KV capacity ({self.have} virtual tokens)"


def misfit(prompt: int, max_new: int, capacity: int, max_positions: int | None = None,
           extra: int = 0) -> Misfit | None:
    """None when the request fits `capacity` virtual KV tokens (and `max_positions`, when known)."""
    rows = kv_rows(prompt, max_new, extra)
    if rows > capacity:
        return Misfit("capacity", prompt, max_new, extra, rows, capacity)
    if max_positions and prompt + max_new > max_positions:
        return Misfit("positions", prompt, max_new, extra, prompt + max_new, max_positions)
    return None


def max_total(capacity: int, context: int | None = None, extra: int = 0) -> int:
    """The longest prompt + output one request may reach: the context, or less when the KV pool holds less."""
    most = capacity + 1 - extra            # kv_rows(prompt, max_new, extra) <= capacity
    return min(most, context) if context else most


def room(prompt: int, capacity: int, max_positions: int | None = None, extra: int = 0) -> int:
    """The largest max_new that still fits (below 1: nothing does)."""
    return max_total(capacity, max_positions, extra) - prompt
