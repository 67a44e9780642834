"""The launch config's `runtime` section in effect in this process: set once by the worker, read by the
kernels.

    use(section)        the worker (or a benchmark that loads a model itself) installs the plan's settings
    using(**fields)     a `with` block under some fields replaced (tests, A/B benchmarks)
    current()           what blas, fp8_parts, gemm16 and the attention tables read (defaults until `use`)

One value per process, replaced only through `use`, so a test or a benchmark can run two settings in turn.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from dcpctl.contract.launch_config import RuntimeSection

_current = RuntimeSection()


def use(section: RuntimeSection) -> None:
    global _current
    if not isinstance(section, RuntimeSection):
        raise TypeError(f"settings.use takes a RuntimeSection, got {type(section).__name__}")
    _current = section


def current() -> RuntimeSection:
    return _current


@contextmanager
def using(**fields: Any) -> Iterator[RuntimeSection]:
    """The current settings with some fields replaced, for the `with` block."""
    before = _current
    use(replace(_current, **fields))
    try:
        yield _current
    finally:
        use(before)
