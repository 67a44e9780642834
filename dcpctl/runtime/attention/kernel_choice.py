"""Which build of ours (the `triton` backend) runs, Gluon or Triton, and why: made once per shape and said once.

    local attention: ...      (one `dcpctl-note` line per distinct choice; the launcher shows each once)

The selector (selector.py) decides which backend runs a batch; this is the `triton` backend's own variant, as
FlashInfer's wrapper picks its own kernel.  The Gluon (Hopper) build runs when the tile config asks for it and
nothing below blocks it; otherwise the Triton build runs with the same tiles.  `gluon_blocker` is pure (the GPU
is a `GpuFacts` value), so tests can ask it about hardware they do not have; `use_gluon` is the per-layer
question, memoized.
"""
from __future__ import annotations

import functools
import torch

from dcpctl.runtime.attention.gluon_mla import UNAVAILABLE, smem_bytes
from dcpctl.runtime import settings
from dcpctl.runtime.attention.kernel_config import KernelConfig, tuned_configs
from dcpctl.runtime.gpu import GpuFacts, gpu_facts
from dcpctl.runtime.notes import note_once


def gluon_blocker(cfg: KernelConfig, gpu: GpuFacts | None, kv_dtype: torch.dtype, row: int, v_dim: int,
                  kv_scale: float | None = None, gluon_missing: str | None = UNAVAILABLE) -> str | None:
    """Why `cfg` cannot run the Gluon kernel (a clause for a sentence), or None when it can.  gpu: None off CUDA."""
    rope = row - v_dim
    if not cfg.gluon:
        return "the tile config does not ask for it"
    if gpu is None:
        return "the KV pool is not on a GPU"
    if gpu.sm[0] != 9:
        return f"sm_{gpu.sm[0]}{gpu.sm[1]} is not Hopper (sm_90)"
    if kv_dtype.itemsize != 2:
        return f"the KV pool is {str(kv_dtype).removeprefix('torch.')} (it reads 16-bit pools)"
    if kv_scale not in (None, 1.0):
        return "the KV pool carries a scale"
    if not (cfg.block_h == 64 and cfg.num_warps == 8 and cfg.num_stages >= 2 and cfg.block_n in (16, 32, 64, 128)):
        return f"it does not run the tiles {tuple(cfg)[:4]} (64 heads, 8 warps, >= 2 stages, 16-128 tokens)"
    if v_dim % 64 or v_dim > 512 or rope % 64 or rope > 256:
        return f"the latent row {v_dim} + {rope} is not 64-element parts (at most 512 + 256)"
    need = smem_bytes(cfg.block_h, cfg.block_n, cfg.num_stages, row)
    if need > gpu.smem_per_block:
        return f"its tiles need {need // 1024} KB of shared memory, over the GPU's {gpu.smem_per_block // 1024} KB"
    return gluon_missing                 # last: only worth saying where a Triton change alone would help


_failed: set[KernelConfig] = set()    # configs whose Gluon kernel failed to build here: Triton from then on


def mark_failed(cfg: KernelConfig, why: str) -> None:
    _failed.add(cfg)
    note_once(f"the Gluon MLA kernel did not build here ({why}); the Triton kernel runs instead")


def use_gluon(cfg: KernelConfig, kv_pool: torch.Tensor, v_dim: int, kv_scale: float | None = None) -> bool:
    """Whether `cfg` runs the Gluon kernel for this pool (asked once per layer; memoized per shape)."""
    return cfg not in _failed and _blocker_here(cfg, kv_pool.device, kv_pool.dtype, kv_pool.shape[-1], v_dim,
                                                kv_scale) is None


@functools.lru_cache(maxsize=None)
def _blocker_here(cfg: KernelConfig, device: torch.device, kv_dtype: torch.dtype, row: int, v_dim: int,
                  kv_scale: float | None) -> str | None:
    gpu = gpu_facts(device) if device.type == "cuda" else None
    return gluon_blocker(cfg, gpu, kv_dtype, row, v_dim, kv_scale)


@functools.lru_cache(maxsize=None)
def announce(heads: int, cfg: KernelConfig, device: torch.device, kv_dtype: torch.dtype, row: int, v_dim: int,
             kv_scale: float | None) -> None:
    """Print (once per shape) the kernel that runs for `heads` query heads per rank over this pool, and why."""
    note_once(describe(heads, cfg, device, kv_dtype, row, v_dim, kv_scale))


def describe(heads: int, cfg: KernelConfig, device: torch.device, kv_dtype: torch.dtype, row: int, v_dim: int,
             kv_scale: float | None) -> str:
    """The default config's kernel for `heads` query heads per rank, and why (a line for `announce`)."""
    tiles = f"{cfg.block_h} heads x {cfg.block_n} tokens per program, {cfg.num_stages} stages"
    blocker = "it did not build here" if cfg in _failed else _blocker_here(cfg, device, kv_dtype, row, v_dim, kv_scale)
    if blocker is None:
        return f"local attention: the Gluon MLA kernel for Hopper ({tiles}) for {heads} query heads per rank"
    if not cfg.gluon:
        override = settings.current().mla_configs
        blocker = ("--mla-configs does not ask for it" if override and heads in tuned_configs(override) else
                   f"{heads} query heads per rank are not a multiple of its 64")
    return f"local attention: the Triton MLA kernel ({tiles}) for {heads} query heads per rank (not the Gluon kernel: {blocker})"
