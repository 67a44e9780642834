"""Which decode batch sizes the runtime captures as CUDA graphs: the launch config's `cuda_graph` section.

SGLang 0.5.23's rule (sglang/srt/arg_groups/cuda_graph_hook.py, generate_decode_cuda_graph_batch_sizes,
no speculative decoding): [1, 2, 4, 8, 12] + range(16, 257, 8) + range(272, 512, 16) +
range(512, max_bs + 1, 32), cut at max_bs, with max_bs itself added.  Its max_bs depends on the GPU's
memory; ours defaults to the most requests that can run at once (--max-running-requests), capped at
MAX_DEFAULT, since a larger graph would never replay.  SGLang spells the flags --cuda-graph-max-bs-decode
/ --cuda-graph-bs-decode today and keeps --cuda-graph-max-bs / --cuda-graph-bs / --disable-cuda-graph as
older names: both spellings are accepted here.
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
            raise UserError(f"--cuda-graph-bs has {max(sizes)} > --cuda-graph-max-bs ({max_bs})")
        return {"batch_sizes": sorted(set(sizes)), "reason": "cuda graphs: decode batch sizes from --cuda-graph-bs"}
    if max_bs is not None:
        why = f"--cuda-graph-max-bs {max_bs}"
    elif max_running:
        max_bs, why = min(max_running, MAX_DEFAULT), f"the max running requests ({max_running})"
    else:
        max_bs, why = MAX_DEFAULT, f"the default {MAX_DEFAULT}"
    got = sglang_decode_sizes(max_bs)
    return {"batch_sizes": got, "reason": f"cuda graphs: decode batch sizes {_span(got)} (SGLang's buckets up to {why})"}


def _span(sizes: list[int]) -> str:
    return ",".join(map(str, sizes)) if len(sizes) <= 6 else f"{','.join(map(str, sizes[:5]))},...,{sizes[-1]}"
