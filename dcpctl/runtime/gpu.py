"""This GPU as the runtime's kernels need it: compute capability, shared memory per block, SM count, asked once."""
from __future__ import annotations

import functools
from typing import NamedTuple

import torch

from dcpctl.plan.detect import Probe, probe


class GpuFacts(NamedTuple):
    sm: tuple[int, int]       # compute capability
    smem_per_block: int       # the per-block opt-in maximum of shared memory, bytes
    sms: int                  # streaming multiprocessors (the split choice's wave size)


@functools.lru_cache(maxsize=None)
def gpu_facts(device: torch.device) -> GpuFacts:
    """This GPU as the plan's memoized probe saw it (`dcpctl.plan.detect.probe`, matched by UUID), plus what
    only torch knows (shared memory, SM count): the plan and the runtime read one answer about the machine."""
    return facts_from(torch.cuda.get_device_properties(device), probe())


def facts_from(props: object, found: Probe | None) -> GpuFacts:
    gpu = found.find(str(getattr(props, "uuid", ""))) if found else None
    sm = divmod(gpu.sm, 10) if gpu else (props.major, props.minor)   # type: ignore[attr-defined]
    # the opt-in per-block maximum is the per-SM size less 1 KB reserved by the driver (227 KB on H100/H200)
    return GpuFacts(sm, props.shared_memory_per_multiprocessor - 1024,  # type: ignore[attr-defined]
                    props.multi_processor_count)  # type: ignore[attr-defined]
