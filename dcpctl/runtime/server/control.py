"""The step's control message, broadcast by rank 0 as tensors over a gloo group.

    header  int64 [4]: shutdown, n_new, n_cancel, n_prompt_tokens   (every step: the heartbeat)
    ints    int64 [n_new * 7 + n_cancel + n_prompt_tokens]:
            per new request (rid, prompt_len, max_new_tokens, top_k, seed, logprobs, ignore_eos),
            then the cancelled rids, then every new prompt's token ids in order
    floats  float64 [n_new * 2]: per new request (temperature, top_p)

Only fixed-layout numbers cross the network, so a rank never unpickles anything it receives.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dcpctl.runtime.engine.request import SamplingParams

if TYPE_CHECKING:     # torch loads on the ranks that broadcast, not in the HTTP workers that build Control
    import torch

INT_FIELDS = ("max_new_tokens", "top_k", "seed", "logprobs", "ignore_eos")
FLOAT_FIELDS = ("temperature", "top_p")
PER_NEW = 2 + len(INT_FIELDS)  # rid, prompt_len, INT_FIELDS


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


def encode(msg: Control) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    import torch
    ints: list[int] = []
    for r in msg.new:
        ints += [r.rid, len(r.prompt)] + [int(getattr(r.params, f)) for f in INT_FIELDS]
    ints += msg.cancel
    for r in msg.new:
        ints += r.prompt
    floats = [float(getattr(r.params, f)) for r in msg.new for f in FLOAT_FIELDS]
    header = [int(msg.shutdown), len(msg.new), len(msg.cancel), sum(len(r.prompt) for r in msg.new)]
    return (torch.tensor(header, dtype=torch.int64), torch.tensor(ints, dtype=torch.int64),
            torch.tensor(floats, dtype=torch.float64))


def decode(header: torch.Tensor, ints: torch.Tensor, floats: torch.Tensor) -> Control:
    shutdown, n_new, n_cancel, n_tok = (int(x) for x in header.tolist())
    iv, fv = ints.tolist(), floats.tolist()
    assert len(iv) == n_new * PER_NEW + n_cancel + n_tok and len(fv) == n_new * len(FLOAT_FIELDS)
    new, at = [], n_new * PER_NEW + n_cancel
    for i in range(n_new):
        rec = iv[i * PER_NEW:(i + 1) * PER_NEW]
        rid, plen, rest = rec[0], rec[1], rec[2:]
        kw: dict[str, Any] = dict(zip(INT_FIELDS, rest))
        kw["logprobs"], kw["ignore_eos"] = bool(kw["logprobs"]), bool(kw["ignore_eos"])
        kw.update(zip(FLOAT_FIELDS, fv[i * len(FLOAT_FIELDS):(i + 1) * len(FLOAT_FIELDS)]))
        new.append(NewRequest(rid, iv[at:at + plen], SamplingParams(**kw)))
        at += plen
    return Control(new, iv[n_new * PER_NEW:n_new * PER_NEW + n_cancel], bool(shutdown))


def broadcast_control(msg: Control | None, group: Any = None, src: int = 0) -> Control:
    """Rank `src` passes its message, every other rank None; all return the same Control."""
    import torch
    import torch.distributed as dist

    from dcpctl.runtime.collectives import broadcast
    if not dist.is_initialized() or dist.get_world_size() == 1:
        assert msg is not None
        return msg
    group = group if group is not None else dist.group.WORLD     # None: the default group (the seam's None is one rank)
    mine = encode(msg) if msg is not None else None
    header = mine[0] if mine else torch.zeros(4, dtype=torch.int64)
    broadcast(header, src, group)
    _, n_new, n_cancel, n_tok = (int(x) for x in header.tolist())
    if n_new == 0 and n_cancel == 0:
        return Control(shutdown=bool(header[0]))
    ints = mine[1] if mine else torch.zeros(n_new * PER_NEW + n_cancel + n_tok, dtype=torch.int64)
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
