"""Which decode batch sizes and prefill token counts the runtime captures as CUDA graphs: the launch config's
`cuda_graph` section.

Decode:
SGLang 0.5.23's rule (sglang/srt/arg_groups/cuda_graph_hook.py, generate_decode_cuda_graph_batch_sizes,
no speculative decoding): [1, 2, 4, 8, 12] + range(16, 257, 8) + range(272, 512, 16) +
range(512, max_bs + 1, 32), cut at max_bs, with max_bs itself added.  Its max_bs depends on the GPU's
memory; ours defaults to the most requests that can run at once (--max-running-requests), capped at
MAX_DEFAULT, since a larger graph would never replay.  The flags are SGLang 0.5.23's: --cuda-graph-max-bs-decode,
--cuda-graph-bs-decode and its deprecated --disable-cuda-graph; --cuda-graph-max-bs and --cuda-graph-bs are
refused as ambiguous, as its parser refuses them (each is a prefix of the -decode and the -prefill flag).

Prefill: SGLang 0.5.23 captures prefill by default on CUDA (its `breakable` backend,
model_executor/cuda_graph_config.py default_prefill_backend) at the token counts of
arg_groups/cuda_graph_hook.py generate_prefill_cuda_graph_batch_sizes, up to --cuda-graph-max-bs-prefill, by
default min(8192, --chunked-prefill-size) for MLA models (arg_groups/memory_hook.py).  dcpctl's pieces are each
layer's MLP (runtime/models/mlp_graphs.py).  Flags as SGLang's: --cuda-graph-backend-prefill breakable|disabled
(`full`, one graph of the whole forward, is not built here), --disable-prefill-cuda-graph, --cuda-graph-bs-prefill;
--disable-cuda-graph turns off both phases, as in SGLang.
"""
from __future__ import annotations

from typing import Any

from dcpctl.plan.errors import UserError

MAX_DEFAULT = 256


def sglang_decode_sizes(max_bs: int) -> list[int]:
    """SGLang's decode capture sizes up to max_bs (module docstring)."""
    sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + list(range(512, max_bs + 1, 32))
    sizes = [b for b in sizes if b <= max_bs]
    return sizes if max_bs in sizes else sizes + [max_bs]


def cuda_graph_section(device: str, disable: bool, max_bs: int | None, sizes: list[int] | None,
                       max_running: int | None) -> dict[str, Any]:
    """{"batch_sizes": [...], "reason": "..."}: [] means every step runs eagerly (the reason says why)."""
    if device != "cuda":
        return {"batch_sizes": [], "reason": "cuda graphs: off (CPU run)"}
    if disable:
        return {"batch_sizes": [], "reason": "cuda graphs: off (--disable-cuda-graph)"}
    if sizes:
        if max_bs is not None and max(sizes) > max_bs:
            raise UserError(f"--cuda-graph-bs-decode has {max(sizes)} > --cuda-graph-max-bs-decode ({max_bs})")
        return {"batch_sizes": sorted(set(sizes)), "reason": "cuda graphs: decode batch sizes from --cuda-graph-bs-decode"}
    if max_bs is not None:
        why = f"--cuda-graph-max-bs-decode {max_bs}"
    elif max_running:
        max_bs, why = min(max_running, MAX_DEFAULT), f"the max running requests ({max_running})"
    else:
        max_bs, why = MAX_DEFAULT, f"the default {MAX_DEFAULT}"
    got = sglang_decode_sizes(max_bs)
    return {"batch_sizes": got, "reason": f"cuda graphs: decode batch sizes {_span(got)} (SGLang's buckets up to {why})"}


PREFILL_MLA_MAX = 8192     # SGLang's cap on the prefill capture for MLA models


def sglang_prefill_tokens(max_tokens: int) -> list[int]:
    """SGLang's prefill capture sizes (token counts) up to max_tokens (module docstring)."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256)) + list(range(4608, max_tokens + 1, 512)))
    return [s for s in sizes if s <= max_tokens]


def prefill_section(device: str, disable: bool, backend: str | None, max_tokens: int | None, sizes: list[int] | None,
                    chunk: int) -> dict[str, Any]:
    """{"prefill_tokens": [...], "prefill_reason": "..."}: the token counts each layer's MLP is captured at."""
    if backend not in (None, "breakable", "disabled"):
        raise UserError(f"--cuda-graph-backend-prefill {backend} is not supported: dcpctl captures prefill in "
                        "pieces between the attention calls (breakable) or not at all (disabled)")
    off = ("CPU run" if device != "cuda" else "--disable-cuda-graph" if disable
           else f"--cuda-graph-backend-prefill {backend}" if backend == "disabled" else None)
    if off:
        return {"prefill_tokens": [], "prefill_reason": f"prefill cuda graphs: off ({off})"}
    if sizes:
        if max_tokens is not None and max(sizes) > max_tokens:
            raise UserError(f"--cuda-graph-bs-prefill has {max(sizes)} > --cuda-graph-max-bs-prefill ({max_tokens})")
        got, why = sorted(set(sizes)), "from --cuda-graph-bs-prefill"
    else:
        if max_tokens is not None:
            why = f"SGLang's buckets up to --cuda-graph-max-bs-prefill {max_tokens}"
        else:
            max_tokens = min(PREFILL_MLA_MAX, chunk) if chunk > 0 else PREFILL_MLA_MAX
            why = f"SGLang's buckets up to min({PREFILL_MLA_MAX}, the chunked prefill size), as for MLA models"
        got = sglang_prefill_tokens(max_tokens)
        if not got:
            return {"prefill_tokens": [], "prefill_reason": f"prefill cuda graphs: off (no token count of SGLang's "
                                                             f"buckets is at most {max_tokens})"}
    return {"prefill_tokens": got, "prefill_reason": f"prefill cuda graphs: each layer's MLP at token counts "
                                                     f"{_span(got)} ({why}; attention runs between them)"}


def _span(sizes: list[int]) -> str:
    return ",".join(map(str, sizes)) if len(sizes) <= 6 else f"{','.join(map(str, sizes[:5]))},...,{sizes[-1]}"
