"""The step's control message, broadcast by rank 0 as tensors over a gloo group.

    header  int64 [4]: shutdown, n_new, n_cancel, n_tail   (every step: the heartbeat)
    ints    int64 [n_new * 9 + n_cancel + n_tail]:
            per new request (rid, prompt_len, rules_words, max_new_tokens, top_k, seed, logprobs, ignore_eos,
            min_tokens), then the cancelled rids, then every new prompt's token ids in order, then every new
            request's rules (below), rules_words int64 words each
    floats  float64 [n_new * 3]: per new request (temperature, top_p, min_p)

A request's variable-length rules (stop_token_ids, logit_bias, allowed_token_ids, grammar: engine/request.py)
go as the UTF-8 JSON of the ones it sets, zero-padded to whole int64 words (none set: zero words).  Only
numbers and JSON text cross the network, so a rank never unpickles anything it receives.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dcpctl.runtime.engine.request import SamplingParams

if TYPE_CHECKING:     # torch loads on the ranks that broadcast, not in the HTTP workers that build Control
    import torch

INT_FIELDS = ("max_new_tokens", "top_k", "seed", "logprobs", "ignore_eos", "min_tokens")
FLOAT_FIELDS = ("temperature", "top_p", "min_p")
RULE_FIELDS = ("stop_token_ids", "logit_bias", "allowed_token_ids", "grammar")
PER_NEW = 3 + len(INT_FIELDS)  # rid, prompt_len, rules_words, INT_FIELDS


@dataclass(frozen=True)
class NewRequest:
    rid: int
    prompt: list[int]
    params: SamplingParams


@dataclass
class Control:
    new: list[NewRequest] = field(default_factory=list)
    cancel: list[int] = field(default_factory=list)
    shutdown: bool = False

    @property
    def empty(self) -> bool:
        return not (self.new or self.cancel or self.shutdown)


def rule_words(params: SamplingParams) -> list[int]:
    """The rules a request sets, as JSON packed into little-endian int64 words (none set: [])."""
    rules = {f: getattr(params, f) for f in RULE_FIELDS if getattr(params, f) not in ((), None)}
    if not rules:
        return []
    raw = json.dumps(rules).encode()
    raw += bytes(-len(raw) % 8)
    return [int.from_bytes(raw[i:i + 8], "little", signed=True) for i in range(0, len(raw), 8)]


def read_rules(words: list[int]) -> dict[str, Any]:
    """SamplingParams keyword arguments from rule_words' output."""
    if not words:
        return {}
    raw = b"".join(w.to_bytes(8, "little", signed=True) for w in words).rstrip(b"\0")
    rules = json.loads(raw)
    for name in ("stop_token_ids", "allowed_token_ids"):
        if name in rules:
            rules[name] = tuple(int(t) for t in rules[name])
    if "logit_bias" in rules:
        rules["logit_bias"] = tuple((int(t), float(b)) for t, b in rules["logit_bias"])
    return rules


def encode(msg: Control) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    import torch
    ints: list[int] = []
    words = [rule_words(r.params) for r in msg.new]
    for r, w in zip(msg.new, words):
        ints += [r.rid, len(r.prompt), len(w)] + [int(getattr(r.params, f)) for f in INT_FIELDS]
    ints += msg.cancel
    for r in msg.new:
        ints += r.prompt
    for w in words:
        ints += w
    floats = [float(getattr(r.params, f)) for r in msg.new for f in FLOAT_FIELDS]
    header = [int(msg.shutdown), len(msg.new), len(msg.cancel),
              len(ints) - len(msg.new) * PER_NEW - len(msg.cancel)]
    return (torch.tensor(header, dtype=torch.int64), torch.tensor(ints, dtype=torch.int64),
            torch.tensor(floats, dtype=torch.float64))


def decode(header: torch.Tensor, ints: torch.Tensor, floats: torch.Tensor) -> Control:
    shutdown, n_new, n_cancel, n_tail = (int(x) for x in header.tolist())
    iv, fv = ints.tolist(), floats.tolist()
    assert len(iv) == n_new * PER_NEW + n_cancel + n_tail and len(fv) == n_new * len(FLOAT_FIELDS)
    recs = [iv[i * PER_NEW:(i + 1) * PER_NEW] for i in range(n_new)]
    at = n_new * PER_NEW + n_cancel
    prompts = []
    for rec in recs:
        prompts.append(iv[at:at + rec[1]])
        at += rec[1]
    new = []
    for i, rec in enumerate(recs):
        kw: dict[str, Any] = dict(zip(INT_FIELDS, rec[3:]))
        kw["logprobs"], kw["ignore_eos"] = bool(kw["logprobs"]), bool(kw["ignore_eos"])
        kw.update(zip(FLOAT_FIELDS, fv[i * len(FLOAT_FIELDS):(i + 1) * len(FLOAT_FIELDS)]))
        kw.update(read_rules(iv[at:at + rec[2]]))
        at += rec[2]
        new.append(NewRequest(rec[0], prompts[i], SamplingParams(**kw)))
    return Control(new, iv[n_new * PER_NEW:n_new * PER_NEW + n_cancel], bool(shutdown))


def broadcast_control(msg: Control | None, group: Any = None, src: int = 0) -> Control:
    """Rank `src` passes its message, every other rank None; all return the same Control."""
    import torch
    import torch.distributed as dist

    from dcpctl.runtime.collectives import broadcast
    if not dist.is_initialized() or dist.get_world_size() == 1:
        assert msg is not None
        return msg
    group = group if group is not None else dist.group.WORLD     # None: the default group (the seam's None is
                                                                 # one rank)
    mine = encode(msg) if msg is not None else None
    header = mine[0] if mine else torch.zeros(4, dtype=torch.int64)
    broadcast(header, src, group)
    _, n_new, n_cancel, n_tail = (int(x) for x in header.tolist())
    if n_new == 0 and n_cancel == 0:
        return Control(shutdown=bool(header[0]))
    ints = mine[1] if mine else torch.zeros(n_new * PER_NEW + n_cancel + n_tail, dtype=torch.int64)
    floats = mine[2] if mine else torch.zeros(n_new * len(FLOAT_FIELDS), dtype=torch.float64)
    broadcast(ints, src, group)
    if n_new:
        broadcast(floats, src, group)
    return decode(header, ints, floats)


def control_group(backend: str) -> Any:
    """The group the control plane uses: WORLD under gloo, a separate gloo group under NCCL."""
    import torch.distributed as dist
    if not dist.is_initialized() or dist.get_world_size() == 1 or backend == "gloo":
        return None
    return dist.new_group(backend="gloo")
