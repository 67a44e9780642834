"""After ready, a Triton kernel variant built inside the serving loop is a stall of some requests (~0.3-1.5 s
on an H200): say which one, once per variant, with its build time, so a warm-up that missed it can be found.

    compile_watch.after_ready()     # once, when the warm-up is done (server/serve.py)

Triton calls its jit_cache_hook before and its jit_post_compile_hook after each in-process build of a variant
(a hit in Triton's disk cache is a build too, only faster).  A process without Triton watches nothing.
"""
from __future__ import annotations

import time
from typing import Any

from dcpctl.runtime.notes import note_once


def after_ready() -> None:
    try:
        from triton import knobs
    except ImportError:      # CPU-only installs
        return
    rt = knobs.runtime
    started: dict[int, float] = {}
    before_prev, after_prev = rt.jit_cache_hook, rt.jit_post_compile_hook

    def before(**kw: Any) -> Any:
        started[id(kw.get("key"))] = time.perf_counter()
        return before_prev(**kw) if before_prev else None     # falsy: Triton goes on to build it

    def after(**kw: Any) -> Any:
        t0 = started.pop(id(kw.get("key")), None)
        took = f" in {time.perf_counter() - t0:.2f} s" if t0 is not None else ""
        what = " ".join(str(kw.get("repr")).split())      # one line: the kernel, its options and argument
                                                          # types
        note_once(f"Triton built a kernel variant after ready{took} (the warm-up did not meet it; the step "
                  f"that needed it waited): {what[:1200]}")
        return after_prev(**kw) if after_prev else None

    rt.jit_cache_hook, rt.jit_post_compile_hook = before, after
