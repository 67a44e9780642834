"""Absorbed or MHA form per chunk of a batch: one rule, from host ints, identical on every rank of a DCP
group.

Per MLA layer and head, with q/k = nope + rope, R = L + rope (the latent row) and a chunk of T new tokens
ending at position E (P = T*(E - T) + T*(T+1)/2 causal query-key pairs):

    absorbed = P * (R + L)                        # q.k over the latent row, p.v over the latent
    mha      = E * (nope + v) * L + P * (qk + v)  # up-project every key row once, then q.k and p.v per head

A chunk runs in the MHA form when it is the smaller (DeepSeek-V3 shapes: a fresh prompt of >= 341 tokens, or
an extend of >= ~171 new tokens over a long prefix); decode, verification and short extends stay absorbed.  A
mixed batch (prefill chunks beside decodes) is split: each form runs its sub-batch in the same layer call.
The same split SGLang makes (forward_normal for prefill/extend, forward_absorb for decode and verify) and
vLLM's MLA backends make (requests above the decode threshold run the MHA prefill), here written as the FLOP
count. Both sides count per DCP group (every rank holds 1/c of the rows), so the rule is the same on every
rank.
"""
from __future__ import annotations

from typing import Iterable

from dcpctl.plan.hf_config import MlaShape
from dcpctl.runtime.attention.layout import SeqChunk

FORMS = ("auto", "absorbed", "mha")


def form_costs(chunks: Iterable[SeqChunk], m: MlaShape) -> tuple[int, int]:
    """(absorbed, mha) attention multiply-adds per head of one layer for these chunks."""
    L, rope, nope, v = m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim, m.v_head_dim
    absorbed = mha = 0
    for ch in chunks:
        t, end = ch.num_tokens, ch.start + ch.num_tokens
        pairs = t * ch.start + t * (t + 1) // 2
        absorbed += pairs * (2 * L + rope)
        mha += end * (nope + v) * L + pairs * (nope + rope + v)
    return absorbed, mha


def pick_form(requested: str, chunks: list[SeqChunk], m: MlaShape) -> tuple[list[bool], str]:
    """(per chunk: MHA form?, the reason said once): `requested` is auto (the FLOP rule above, per chunk),
    absorbed or mha (every chunk)."""
    if requested not in FORMS:
        raise ValueError(f"attention form {requested!r} is not supported; valid: {list(FORMS)}")
    if requested != "auto":
        return [requested == "mha"] * len(chunks), f"attention form: {requested} (asked for)"
    mha = [cost[1] < cost[0] for cost in (form_costs([ch], m) for ch in chunks)]
    rule = ("auto: per chunk, the MHA form (kv_b_proj up-projection of the cached rows block by block, "
            "then qk/v-wide attention) when its multiply-adds are fewer than the absorbed form's")
    if any(mha) and not all(mha):
        return mha, ("attention form: split (MHA for the long prefills and extends, absorbed for the "
                     f"decodes, verification and short extends of the same batch; {rule})")
    if mha and all(mha):
        return mha, f"attention form: MHA for long prefills and extends ({rule})"
    return mha, f"attention form: absorbed for decode, verification and short extends ({rule})"


def part_of(chunks: list[SeqChunk], forms: list[bool], mha: bool) -> tuple[list[SeqChunk], list[int]]:
    """(the chunks in form `mha`, their batch rows in order): one side of a mixed batch."""
    part, rows, row = [], [], 0
    for ch, m in zip(chunks, forms):
        if m == mha:
            part.append(ch)
            rows += range(row, row + ch.num_tokens)
        row += ch.num_tokens
    return part, rows
