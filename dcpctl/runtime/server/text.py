"""Text around token ids: incremental detokenization with stop strings, and chat prompts.

TextStream decodes only a window of the output per token, as vLLM and SGLang do: the ids since the last
confirmed text plus the one step before it (`decode(ids[prefix:])` minus `decode(ids[prefix:read])`), so a
token costs the same at the 10th and the 10,000th output token.  Text ending in a replacement character
stays unconfirmed (an incomplete UTF-8 sequence may still complete), and any confirmed tail that could be
the start of a stop string is held back; on a stop string it truncates the text there (after it with
`keep_stop`: vLLM's include_stop_str_in_output, SGLang's no_stop_trim) and stops.  Before `min_tokens` tokens
no stop string counts (vLLM and SGLang check none before min_tokens either).
"""
from __future__ import annotations

from typing import Any

PLAIN_ROLES = ("system", "user", "assistant", "tool")


class TextStream:
    def __init__(self, tok: Any, stop: list[str] | None = None, keep_stop: bool = False,
                 skip_special: bool = True, min_tokens: int = 0) -> None:
        self.tok = tok
        self.keep_stop, self.skip_special, self.min_tokens = keep_stop, skip_special, min_tokens
        self.stop = [s for s in (stop or []) if s]
        self.longest = max((len(s) for s in self.stop), default=0)
        self.ids: list[int] = []
        self.text = ""         # confirmed text of ids[:read]
        self.prefix = 0        # ids[prefix:read]: the context the next decode starts from
        self.read = 0
        self.sent = ""         # text already handed out
        self.stopped = False   # a stop string matched

    def push(self, token: int, final: bool = False) -> str:
        """Add one generated id; the text that may be emitted now."""
        self.ids.append(token)
        self._confirm(final)
        text = self.text
        armed = len(self.ids) >= self.min_tokens
        hits = [(i, i + len(s)) for s in self.stop if armed and (i := text.find(s, len(self.sent))) >= 0]
        if hits:
            start, end = min(hits)
            text, self.stopped, final = text[:end if self.keep_stop else start], True, True
        visible = text if final or not armed else text[:len(text) - self._hold(text)]
        delta, self.sent = visible[len(self.sent):], visible
        return delta

    def flush(self) -> str:
        """Whatever was held back, at the end of the request (no stop string matched)."""
        if self.stopped:
            return ""
        self._confirm(True)
        delta, self.sent = self.text[len(self.sent):], self.text
        return delta

    def _confirm(self, final: bool) -> None:
        # the new ids' text, decoded after their context; unconfirmed while it ends in a partial character
        skip = self.skip_special
        before = (self.tok.decode(self.ids[self.prefix:self.read], skip_special=skip)
                  if self.read > self.prefix else "")
        after = self.tok.decode(self.ids[self.prefix:], skip_special=skip)
        if len(after) > len(before) and (final or not after.endswith("\ufffd")):
            self.text += after[len(before):]
            self.prefix, self.read = self.read, len(self.ids)

    def _hold(self, text: str) -> int:
        for k in range(min(self.longest - 1, len(text) - len(self.sent)), 0, -1):
            if any(s.startswith(text[-k:]) for s in self.stop):
                return k
        return 0


def token_text(tok: Any, token: int) -> str:
    """One id as text for logprob tables (special tokens shown by name)."""
    return tok.decode([token], skip_special=False)


def chat_prompt(tok: Any, messages: list[dict[str, str]], add_generation_prompt: bool = True,
                continue_final_message: bool = False,
                template_kwargs: dict[str, Any] | None = None) -> list[int]:
    """The checkpoint's chat template when it has one, else a plain `<|role|>` template with BOS.

    add_generation_prompt ends the prompt with the assistant's turn header; continue_final_message leaves the
    last message open instead (no end of turn after it), so the reply continues it (vLLM's and Hugging Face's
    meaning)."""
    hf = getattr(tok, "tok", None)
    if hf is not None and getattr(hf, "chat_template", None):
        ids = hf.apply_chat_template(messages, tokenize=True, add_generation_prompt=add_generation_prompt,
                                     continue_final_message=continue_final_message, **(template_kwargs or {}))
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return [int(i) for i in ids]
    turns = [f"<|{m['role']}|>\n{m['content']}\n" for m in messages]
    if continue_final_message:
        turns[-1] = turns[-1][:-1]
    tail = "<|assistant|>\n" if add_generation_prompt else ""
    return tok.encode("".join(turns) + tail, add_bos=True)
