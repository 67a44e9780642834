"""Absorbed or MHA form for one forward batch: one rule, from host ints, identical on every rank of a DCP group.

Per MLA layer and head, with q/k = nope + rope, R = L + rope (the latent row) and a chunk of T new tokens
ending at position E (P = T*(E - T) + T*(T+1)/2 causal query-key pairs, summed over the batch's chunks):

    absorbed = P * (R + L)                        # q.k over the latent row, p.v over the latent
    mha      = E * (nope + v) * L + P * (qk + v)  # up-project every key row once, then q.k and p.v per head

The MHA form runs when it is the smaller (DeepSeek-V3 shapes: a fresh prompt of >= 341 tokens, or an extend
of >= ~171 new tokens over a long prefix); decode, verification and short extends stay absorbed.  The same
split SGLang makes (forward_normal for prefill/extend, forward_absorb for decode and verify) and vLLM's MLA
backends make (requests above the decode threshold run the MHA prefill), here written as the FLOP count.
Both sides count per DCP group (every rank holds 1/c of the rows), so the rule is the same on every rank.
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


def pick_form(requested: str, chunks: list[SeqChunk], m: MlaShape) -> tuple[bool, str]:
    """(MHA form?, the reason said once): `requested` is auto (the FLOP rule above), absorbed or mha."""
    if requested not in FORMS:
        raise ValueError(f"attention form {requested!r} is not supported; valid: {list(FORMS)}")
    if requested != "auto":
        return requested == "mha", f"attention form: {requested} (asked for)"
    absorbed, mha = form_costs(chunks, m)
    rule = ("auto: per batch, the MHA form (kv_b_proj up-projection of the cached rows block by block, "
            "then qk/v-wide attention) when its multiply-adds are fewer than the absorbed form's")
    if mha < absorbed:
        return True, f"attention form: MHA for long prefills and extends ({rule})"
    return False, f"attention form: absorbed for decode, verification and short extends ({rule})"
