"""Tokenizers: the built-in byte tokenizer of the tiny model, or a Hugging Face one.

    ByteTokenizer(): ids 0..255 are bytes; BOS 256, EOS 257, PAD 258, UNK 259 (vocab_size 260)
        .encode(text, add_bos=False) -> list[int]   .decode(ids, skip_special=True) -> str
        .save(dir)  writes dcpctl_tokenizer.json plus an HF-compatible tokenizer.json
    load_tokenizer(path) -> ByteTokenizer | HFTokenizer   (same encode/decode/bos_token_id/eos_token_id)

A checkpoint directory holding `dcpctl_tokenizer.json` gets the ByteTokenizer; any other goes
through `transformers.AutoTokenizer` (only when transformers is importable).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MARKER = "dcpctl_tokenizer.json"


class TokenizerError(Exception):
    """No usable tokenizer for a checkpoint directory."""


class ByteTokenizer:
    specials = ("<|bos|>", "<|eos|>", "<|pad|>", "<|unk|>")
    bos_token_id, eos_token_id, pad_token_id = 256, 257, 258
    vocab_size = 256 + len(specials)

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        return ([self.bos_token_id] if add_bos else []) + list(text.encode("utf-8"))

    def decode(self, ids: list[int], skip_special: bool = True) -> str:
        out, raw = [], bytearray()
        for i in ids:
            if i < 256:
                raw.append(i)
                continue
            out.append(raw.decode("utf-8", errors="replace"))
            raw = bytearray()
            if not skip_special and i < self.vocab_size:
                out.append(self.specials[i - 256])
        return "".join(out) + raw.decode("utf-8", errors="replace")

    def save(self, directory: str | Path) -> None:
        d = Path(directory)
        (d / MARKER).write_text(json.dumps({"type": "byte", "vocab_size": self.vocab_size,
                                            "specials": list(self.specials)}, indent=2))
        (d / "tokenizer.json").write_text(json.dumps(_hf_tokenizer_json(self), indent=1))
        (d / "tokenizer_config.json").write_text(json.dumps({
            "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": self.specials[0],
            "eos_token": self.specials[1], "pad_token": self.specials[2], "unk_token": self.specials[3],
            "add_bos_token": False, "add_eos_token": False, "model_max_length": 2048}, indent=2))


def _byte_chars() -> list[str]:
    """GPT-2's printable stand-in character for every byte (what HF's ByteLevel pre-tokenizer uses)."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b], extra = chr(256 + extra), extra + 1
    return [chars[b] for b in range(256)]


def _hf_tokenizer_json(tok: ByteTokenizer) -> dict[str, Any]:
    vocab = {c: b for b, c in enumerate(_byte_chars())}
    added = [{"id": 256 + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(tok.specials)]
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": None, "pre_tokenizer": level, "post_processor": None, "decoder": level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": False, "vocab": vocab, "merges": []}}


class HFTokenizer:
    """transformers.AutoTokenizer behind the ByteTokenizer interface."""

    def __init__(self, tok: Any):
        self.tok = tok
        self.bos_token_id, self.eos_token_id = tok.bos_token_id, tok.eos_token_id
        self.vocab_size = len(tok)

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        ids = list(self.tok.encode(text, add_special_tokens=False))
        return ([self.bos_token_id] if add_bos and self.bos_token_id is not None else []) + ids

    def decode(self, ids: list[int], skip_special: bool = True) -> str:
        return self.tok.decode(ids, skip_special_tokens=skip_special)


def load_tokenizer(path: str | Path) -> ByteTokenizer | HFTokenizer:
    path = Path(path)
    if (path / MARKER).exists():
        return ByteTokenizer()
    try:
        from transformers import AutoTokenizer
    except ImportError as e:
        raise TokenizerError(f"{path} has no {MARKER} and transformers is not installed to read its "
                             "tokenizer") from e
    try:
        return HFTokenizer(AutoTokenizer.from_pretrained(str(path)))
    except Exception as e:  # noqa: BLE001 - any HF failure becomes one clear sentence
        raise TokenizerError(f"cannot load the tokenizer in {path}: {e}") from e
