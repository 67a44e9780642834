"""The local MLA decode kernel's tile config per kernel-head count (the Triton and Gluon kernels read it).

Kept apart from triton_mla so that kernel_choice (which kernel runs, and why) and triton_mla (the kernels)
both read it without importing each other.
"""
from __future__ import annotations

import functools
import json
from typing import NamedTuple


class KernelConfig(NamedTuple):
    block_h: int = 64
    block_n: int = 32
    num_warps: int = 8
    num_stages: int = 2
    occupancy: int = 1      # CTAs per SM assumed when choosing the number of splits
    tma: bool = False       # whole in-page tiles by bulk tensor copy (16-bit pools, page % block_n == 0)
    lazy: bool = False      # rescale acc only when a row's running max grows by more than 8 (base 2)
    ws: bool = False        # warp-specialize the TMA loop (a producer warp issues the loads; Triton >= 3.5)
    gluon: bool = False     # the Gluon kernel (gluon_mla: Hopper, 16-bit pools, block_h 64, 8 warps;
                            # num_stages = its ring depth; bulk tensor copies when page % block_n == 0)


@functools.lru_cache(maxsize=None)
def tuned_configs(path: str) -> dict[int, KernelConfig]:
    """Configs per kernel-head count from a `dcpctl bench kernel --sweep --format json` output (its
    "configs") or a plain {heads: [block_h, block_n, warps, stages, occupancy, tma, lazy, ws, gluon]} JSON
    file."""
    from dcpctl.plan.errors import UserError
    try:
        with open(path) as f:
            doc = json.load(f)
        cfgs = doc.get("configs", doc)
        out = {}
        for h, c in cfgs.items():
            if not isinstance(c, list) or not 2 <= len(c) <= len(KernelConfig._fields):
                raise ValueError(f"heads {h}: expected a list of 2-{len(KernelConfig._fields)} values "
                                 f"{list(KernelConfig._fields)}, got {c!r}")
            out[int(h)] = KernelConfig(*c)
        return out
    except (OSError, ValueError, AttributeError, TypeError) as e:
        raise UserError(f"--mla-configs {path}: not a kernel config file ({e})") from None


# Built-in tiles per kernel-head count where a GPU has no mla_tiles table: (the largest head multiple, tiles),
# the first that divides the head count wins.  A Gluon config runs the Triton kernel with the same tiles where
# the Gluon kernel cannot (`use_gluon`: Hopper only), and on Hopper with bulk tensor copies.
BUILT_IN: tuple[tuple[int, KernelConfig], ...] = (
    (64, KernelConfig(64, 64, 8, 2, 1, True, gluon=True)),
    (32, KernelConfig(32, 64, 8, 2)),
    (1, KernelConfig(16, 128, 8, 2)),
)


def parse_rules(data: dict | None) -> tuple[tuple[int, KernelConfig], ...]:
    """An mla_tiles table ({"by_heads_multiple": [[multiple, [KernelConfig fields]], ...]}), None:
    BUILT_IN."""
    return tuple((int(m), KernelConfig(*c)) for m, c in data["by_heads_multiple"]) if data else BUILT_IN


@functools.lru_cache(maxsize=None)
def _rules(device: object) -> tuple[tuple[int, KernelConfig], ...]:
    from dcpctl.runtime import tuned
    return parse_rules(tuned.table("mla_tiles", device).data)      # the device rule, said once


def default_config(heads: int, device: object = None) -> KernelConfig:
    """Tile config per kernel-head count: the file of --mla-configs (launch config runtime.mla_configs) when
    it has this head count (a sweep's output, for tuning another GPU), else the GPU's mla_tiles tuning table
    (a CUDA `device`; none, or off CUDA: BUILT_IN)."""
    from dcpctl.runtime import settings
    override = settings.current().mla_configs
    if override:
        cfg = tuned_configs(override).get(heads)
        if cfg is not None:
            return cfg
    rules = _rules(device) if getattr(device, "type", None) == "cuda" else BUILT_IN
    return next(cfg for most, cfg in rules if heads % most == 0)
