"""The tuning table of one kind for a CUDA device (dcpctl/tuning's one device rule), said once per kind and
GPU."""
from __future__ import annotations

import functools

import torch

from dcpctl import tuning
from dcpctl.runtime.notes import note_once


@functools.lru_cache(maxsize=None)
def gpu(device: torch.device) -> tuple[str, int]:
    """(the GPU's name as torch reports it, its SM version, e.g. 90)."""
    major, minor = torch.cuda.get_device_capability(device)
    return torch.cuda.get_device_name(device), major * 10 + minor


def table(kind: str, device: torch.device | str) -> tuning.Tuned:
    """The `kind` table for this device (none off CUDA: the built-in defaults), with a note the first time."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return tuning.Tuned(None, None, f"{dev.type}: built-in defaults")
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    t = tuning.load(kind, *gpu(dev))
    note_once(f"tuning: {kind}: {t.how}")
    return t
