"""How the engine schedules: the launch config's `schedule` section, decided once from the flags with its
reason.

SGLang 0.5.23's flags and defaults where they exist: --max-prefill-tokens 16384, --schedule-policy (fcfs here:
the bundled runtime has no radix tree for lpm), --enable-mixed-chunk, and the retract-decode step count (its
SGLANG_RETRACT_DECODE_STEPS, 20) as the decode headroom kept free for every running request.  Two choices
differ from SGLang's defaults, said in the reason: steps are mixed unless --disable-mixed-chunk (SGLang mixes
only with --enable-mixed-chunk; without it every chunk of a waiting prompt runs before the next decode step),
and admission counts the KV a request holds plus that headroom, as vLLM does, instead of SGLang's estimate of
the tokens still to come (new_token_ratio, 0.7 x max_new_tokens at first), so that a large max_tokens that a
request never reaches does not keep others out.
"""
from __future__ import annotations

from typing import Any

from dcpctl.contract.launch_config import DEFAULT_DECODE_HEADROOM, DEFAULT_MAX_PREFILL_TOKENS


def schedule_section(mixed: bool | None, max_prefill_tokens: int | None, chunked_prefill_size: int,
                     policy: str | None = None) -> dict[str, Any]:
    """The `schedule` section (contract ScheduleSection) for these flags (None: not given)."""
    budget = max_prefill_tokens or DEFAULT_MAX_PREFILL_TOKENS
    step = min(chunked_prefill_size, budget) if chunked_prefill_size > 0 else budget
    src = (f"--chunked-prefill-size {chunked_prefill_size}" if 0 < chunked_prefill_size <= budget
           else f"--max-prefill-tokens {budget}")
    if mixed is False:
        steps = (f"prefill steps of up to {step} tokens ({src}) run before decode steps while a prompt is "
                 "unfinished (--disable-mixed-chunk)")
    else:
        why = "--enable-mixed-chunk" if mixed else "the default, so no stream waits on a whole prompt"
        steps = (f"mixed steps: every running decode plus prefill chunks, {step} tokens in all ({src}; "
                 f"{why}); with decode graphs the decodes replay theirs beside an eager forward of the "
                 "chunks, which then take the whole budget")
    split = "" if chunked_prefill_size > 0 else "; prompts are not split (--chunked-prefill-size -1)"
    reason = (f"scheduler: {policy or 'fcfs'}; {steps}{split}; admission on held KV + "
              f"{DEFAULT_DECODE_HEADROOM} positions of headroom per running request; when a step cannot "
              "extend every request, retract-decode (fewest output tokens first, then the longest prompt; "
              "back once its whole max_tokens fits, recomputed)")
    return {"mixed_chunk": mixed is not False, "max_prefill_tokens": budget,
            "decode_headroom": DEFAULT_DECODE_HEADROOM, "policy": policy or "fcfs", "reason": reason}
