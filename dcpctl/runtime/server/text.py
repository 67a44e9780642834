"""Text around token ids: incremental detokenization with stop strings, and chat prompts.

TextStream decodes the whole output each token and emits only the new suffix.  It holds back a
trailing replacement character (an incomplete UTF-8 sequence may still complete) and any tail that
could be the start of a stop string; on a stop string it truncates the text there and stops.
"""
from __future__ import annotations

from typing import Any

PLAIN_ROLES = ("system", "user", "assistant", "tool")


class TextStream:
    def __init__(self, tok: Any, stop: list[str] | None = None) -> None:
        self.tok = tok
        self.stop = [s for s in (stop or []) if s]
        self.ids: list[int] = []
        self.sent = ""         # text already handed out
        self.stopped = False   # a stop string matched

    def push(self, token: int, final: bool = False) -> str:
        """Add one generated id; the text that may be emitted now."""
        self.ids.append(token)
        text = self.tok.decode(self.ids)
        hits = [i for i in (text.find(s) for s in self.stop) if i >= 0]
        if hits:
            text, self.stopped, final = text[:min(hits)], True, True
        visible = text if final else text[:len(text) - self._hold(text)]
        if not visible.startswith(self.sent):  # a decoder rewrote earlier text: never retract
            return ""
        delta, self.sent = visible[len(self.sent):], visible
        return delta

    def flush(self) -> str:
        """Whatever was held back, at the end of the request (no stop string matched)."""
        text = self.tok.decode(self.ids)
        if self.stopped or not text.startswith(self.sent):
            return ""
        delta, self.sent = text[len(self.sent):], text
        return delta

    def _hold(self, text: str) -> int:
        hold = 1 if text.endswith("\ufffd") else 0
        longest = max((len(s) for s in self.stop), default=0)
        for k in range(min(longest - 1, len(text)), 0, -1):
            if any(s.startswith(text[-k:]) for s in self.stop):
                return max(hold, k)
        return hold


def token_text(tok: Any, token: int) -> str:
    """One id as text for logprob tables (special tokens shown by name)."""
    return tok.decode([token], skip_special=False)


def chat_prompt(tok: Any, messages: list[dict[str, str]]) -> list[int]:
    """The checkpoint's chat template when it has one, else a plain `<|role|>` template with BOS."""
    hf = getattr(tok, "tok", None)
    if hf is not None and getattr(hf, "chat_template", None):
        ids = hf.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return [int(i) for i in ids]
    text = "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages) + "<|assistant|>\n"
    return tok.encode(text, add_bos=True)
