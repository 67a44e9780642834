"""After ready, a Triton build is named once per variant, with its time; the hooks it replaces still run."""
from __future__ import annotations

import pytest

from dcpctl.runtime import compile_watch


def test_a_build_after_ready_is_named_once_with_its_time(capsys):
    knobs = pytest.importorskip("triton").knobs
    rt = knobs.runtime
    saved = rt.jit_cache_hook, rt.jit_post_compile_hook
    calls = []
    rt.jit_cache_hook = lambda **kw: calls.append("before")
    rt.jit_post_compile_hook = lambda **kw: calls.append("after")
    try:
        compile_watch.after_ready()
        for _ in range(2):      # the same variant twice: one note
            key = ("sig", "_merge_kernel", 64)
            assert not rt.jit_cache_hook(key=key, repr="_merge_kernel[num_warps=4](S_POW2: 64)", fn=None,
                                         compile={}, is_manual_warmup=False, already_compiled=False)
            rt.jit_post_compile_hook(key=key, repr="_merge_kernel[num_warps=4](S_POW2: 64)", fn=None,
                                     compile={}, is_manual_warmup=False, already_compiled=False)
    finally:
        rt.jit_cache_hook, rt.jit_post_compile_hook = saved
    err = capsys.readouterr().err
    assert err.count("Triton built a kernel variant after ready in ") == 1 and "S_POW2: 64" in err
    assert calls == ["before", "after"] * 2
