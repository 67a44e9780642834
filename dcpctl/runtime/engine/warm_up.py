"""The warm-up before ready, past the graph capture: prefills of a ladder of prompt lengths, prompts past one
chunk (extends of a cached prefix, in both attention forms, even and odd), a pair that extends a prefix of no
round size, two sampled requests (temperature; top-k and top-p),
then every GEMM they used over a grid of token counts (kernels/gemm_warm.py), so the first requests compile
and load nothing.

    room = Room.of(chunk_size, split, capacity, replicas)   what the prompts fit (scheduler, pool)
    warm_up_lengths(top) -> the ladder
    ladder(room) -> the lengths warm_up_prompts prefills
    warm_up_prompts(generate, room, progress)               every rank together, CUDA only
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from dcpctl.runtime.kernels import gemm_warm
from dcpctl.runtime.notes import note_once


# sampled requests after the ladder: temperature alone (the API's default, 1.0), then top-k and top-p as well
SAMPLED = ({"temperature": 1.0, "seed": 1}, {"temperature": 0.7, "top_k": 20, "top_p": 0.9, "seed": 2})


def warm_up_lengths(top: int) -> list[int]:
    """Prompt lengths the warm-up prefills, up to `top` (the prefill chunk): 2^k and 3 * 2^k from 16, each
    also less 1 and less 8.  cuBLAS picks (and lazily loads) a GEMM kernel per range of M, the prefill's token
    count: the first M = 1000 prefill after a warm-up of 128, 37 and 1024 tokens spent 10 ms in its 21
    projection GEMMs against ~3 ms once met (tools/engine_overhead.py on an H200).  Triton compiles separate
    variants for integer arguments divisible by 16 and the rest; the odd lengths meet those too."""
    bases, b = [], 16
    while b <= top:
        bases += [b] + ([b * 3 // 2] if b * 3 // 2 <= top else [])
        b *= 2
    if not bases or bases[-1] != top:
        bases.append(top)
    return sorted({m for base in bases for m in (base, base - 1, base - 8) if 1 <= m <= top})


@dataclass(frozen=True)
class Room:
    """What the warm-up's prompts fit: the prefill chunk, the longest prompt the pool holds, whether prompts
    are split into chunks, and the attention-DP replicas (one request each per length)."""

    chunk: int
    cap: int
    split: bool
    replicas: int

    @staticmethod
    def of(chunk_size: int, split: bool, capacity: int, replicas: int) -> "Room":
        """From the scheduler's chunk (and whether it splits prompts) and the pool's virtual capacity."""
        return Room(chunk_size if split else 2048, min(capacity, 1 << 20) - 2, split, replicas)


def ladder(room: Room) -> list[int]:
    """The prompt lengths warm_up_prompts prefills: warm_up_lengths up to the chunk (or what the pool
    holds)."""
    return warm_up_lengths(min(room.chunk, room.cap))


def warm_up_extends(chunk: int, cap: int) -> list[int]:
    """Prompt lengths past one prefill chunk, so that their second chunk extends a chunk-long cached prefix:
    16 new tokens run the absorbed form with split KV (the eager long-context kernel variant, which the
    ladder's short prompts never reach: the first long prompt beside running streams paid a 1.5 s Gluon build
    on an H200), half a chunk runs the MHA form over a cached key block (its block merge); each also one token
    less, for the kernels' variants of a row count that is not a multiple of 16 (as the ladder's odd lengths).
    At a chunk of 2^k or 3 * 2^k tokens (8192 by default) every chunk size is on the ladder, so no new GEMM
    shape comes with them."""
    return [n for n in (chunk + 16, chunk + 15, chunk + chunk // 2, chunk + chunk // 2 - 1) if n <= cap]


PAIR_HEAD = 37   # the first prompt of the pair: the second's first chunk is the rest of the step, chunk - 37
                 # tokens


def warm_up_pair(chunk: int, cap: int) -> list[int] | None:
    """Two prompt lengths prefilled together: the first (PAIR_HEAD tokens) and the first chunk - PAIR_HEAD
    tokens of the second share a step, and the second's next chunk (half a chunk less 1, the MHA form) extends
    a cached prefix of chunk - PAIR_HEAD rows: not a multiple of the MHA form's key quantum
    (attention/backends/mha_cudnn.py), so its cuDNN call and the memory-efficient kernel's rest and their
    merge run before ready, as a server's split prompts meet them.  None where the pool is too small or
    prompts are not split."""
    second = chunk - PAIR_HEAD + chunk // 2 - 1
    return [PAIR_HEAD, second] if chunk > 2 * PAIR_HEAD and second + PAIR_HEAD <= cap else None


def warm_up_prompts(generate: Callable[[list[dict]], dict], room: Room,
                    progress: Callable[[int, int], None] | None = None) -> None:
    """Through `generate` (Engine.generate): one request per replica for each length of the ladder and of
    warm_up_extends (each its own first token: no prefix is reused), recording the GEMMs, then the SAMPLED
    requests; then those GEMMs over gemm_warm's grid.  Says once what it did."""
    chunk, cap, dp = room.chunk, room.cap, room.replicas
    extends = warm_up_extends(chunk, cap) if room.split else []
    pair = warm_up_pair(chunk, cap) if room.split else None
    lengths = ladder(room) + extends
    runs = [[n] for n in lengths] + ([pair] if pair else [])
    with gemm_warm.recording() as log:
        for k, run in enumerate(runs):
            generate([{"prompt_ids": [(7 * (k + i * len(runs)) + 3 * p + j) % 250 + 1 for j in range(n)],
                       "max_new_tokens": 2} for i in range(dp) for p, n in enumerate(run)])
            if progress is not None:
                progress(k + 1, len(runs) + 1)
        for i, params in enumerate(SAMPLED):   # the sampled path's own kernels (the ladder decodes greedily)
            generate([{"prompt_ids": [(11 * (i + r) + j) % 250 + 1 for j in range(16)], "max_new_tokens": 3,
                       **params} for r in range(dp)])
    t0 = time.perf_counter()
    ms = gemm_warm.warm_ms(min(chunk, cap) * dp)   # attention DP: the MLP runs every replica's rows
    calls = log.warm(ms)
    if progress is not None:
        progress(len(runs) + 1, len(runs) + 1)
    note_once(f"warm-up: {len(lengths) - len(extends)} prefills, {len(extends)} prompts past one chunk "
              f"(extends of a cached prefix), {1 if pair else 0} pair extending a prefix of no round size "
              f"and {len(SAMPLED)} sampled requests, then {len(log)} GEMM shapes x "
              f"up to {len(ms)} token counts ({calls} calls, {time.perf_counter() - t0:.1f} s) so cuBLAS "
              "meets the prefill sizes before ready")
