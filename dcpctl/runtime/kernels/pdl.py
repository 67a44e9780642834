"""Programmatic dependent launch (PDL, sm_90+) for the decode step's Triton kernels.

A kernel launched with PDL may start while the kernel before it on the stream still runs.  Each of ours then
waits (`griddepcontrol.wait`: the kernel before has ended and its writes are visible) before it reads or
writes any tensor, and right after tells the next one that it may launch (`griddepcontrol.launch_dependents`).
So two kernels overlap at most, and what overlaps is the next one's launch and its programs' start, not its
work. The kernels: the norms (norm_triton.py), the q rope and the fused KV write (rope_triton.py), the
per-head bmm, the split merge (attention/fused_merge.py), SwiGLU, the split-K GEMM (gemm16.py) and the Gluon
attention kernel.

    kw() -> a launch's keywords (the kernel's PDL constexpr, and launch_pdl when on)
    enter(PDL) first in a kernel

Every kernel launched with PDL calls `enter` before its first memory access, unconditionally: a kernel that
ended without the wait could let the one after it run before the one before it ended.  A kernel before ours
that does not release (cuBLAS, torch's) lets ours start only when it ends.  Nothing is read before the wait (a
weight prefetch into L2 there measured slower).  A fusion (`DCPCTL_UNFUSED=pdl`), CUDA sm_90+ only, set
once at model load by `configure`.
"""
from __future__ import annotations

import torch

try:
    import triton
except ImportError:  # CPU-only installs: nothing is launched
    triton = None

ON = False            # set by configure() at model load
HAVE_GDC = False

if triton is not None:
    import triton.language as tl
    try:
        from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
        HAVE_GDC = True
    except ImportError:          # an older Triton: PDL stays off (configure), and `enter` is never taken
        @triton.jit
        def gdc_wait():
            pass

        @triton.jit
        def gdc_launch_dependents():
            pass

    @triton.jit
    def enter(PDL: tl.constexpr):
        if PDL:
            gdc_wait()
            gdc_launch_dependents()


def configure(on: bool, device: torch.device | str) -> str | None:
    """At model load: PDL on for the step's Triton kernels when `on` and the GPU is sm_90+; -> why not, or
    None."""
    global ON
    ON = False
    dev = torch.device(device)
    if not on or dev.type != "cuda" or triton is None:
        return None
    if not HAVE_GDC:
        return "Triton has no griddepcontrol (triton.language.extra.cuda.gdc_wait)"
    if torch.cuda.get_device_capability(dev)[0] < 9:
        return "programmatic dependent launch needs sm_90+"
    ON = True
    return None


def kw() -> dict[str, bool]:
    """A PDL kernel's keywords: its PDL constexpr, and launch_pdl when on (older Tritons know no such
    keyword)."""
    return {"PDL": True, "launch_pdl": True} if ON else {"PDL": False}
