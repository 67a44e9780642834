"""Ours as the absorbed `triton` backend: the Gluon (Hopper) or Triton split-KV kernel of
attention/triton_mla.py.

It runs every batch the paged path gives it (decode, and the prefill, extend and verification chunks the field
kernels cannot take).  Which of its two builds runs, with which tiles, is the backend's own variant, made once
per shape and said once: kernel_config.py (tiles per kernel-head count: --mla-configs, the GPU's mla_tiles
table, or built-in) and kernel_choice.py (the Gluon build where nothing blocks it, else the Triton build, same
tiles).
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from dcpctl.plan.attention_names import PORTABLE
from dcpctl.runtime.attention.backends.base import Absorbed, Call, register
from dcpctl.runtime.attention.triton_mla import MAX_PADDED, MLAOut, kernel_takes, mla_decode, triton_available


def blocker(q: Tensor, pool: Tensor, v_dim: int) -> str | None:
    """Why ours cannot run this batch (a clause), or None."""
    if q.device.type != "cuda":
        return "the KV pool is on the CPU"
    if not triton_available(q.device):
        return "Triton is not installed"
    if q.dtype == torch.float64:
        return "float64 runs the exact reference"
    if not kernel_takes(v_dim, q.shape[-1]):
        return (f"the latent row {v_dim} + {q.shape[-1] - v_dim} is wider than the kernel's {MAX_PADDED[0]} "
                f"+ {MAX_PADDED[1]}")
    return None


def launch(kernel: Callable[..., MLAOut], c: Call) -> MLAOut:
    """`kernel` (mla_decode, or its torch reference, which ignores the arguments it has no use for) over one
    layer."""
    lay = c.lay
    # 32-bit row offsets (q_pos): the kernel's bulk tensor copies need them
    return kernel(c.q, c.pool, lay.block_table, lay.local_lens, lay.row_req, lay.q_pos, scale=c.scale,
                  v_dim=c.v_dim, dcp_rank=c.dcp_rank, dcp_size=c.dcp_size, out=c.out, out_dtype=c.out_dtype,
                  max_local_len=lay.max_local_len, descriptors=c.descriptors)


class Ours(Absorbed):
    name, label = PORTABLE, "ours"

    def blocker(self, q: Tensor, pool: Tensor, v_dim: int) -> str | None:
        return blocker(q, pool, v_dim)

    def run(self, call: Call, state: None) -> MLAOut:
        return launch(mla_decode, call)


BACKEND = register(Ours())
