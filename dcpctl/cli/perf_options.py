"""The performance model's flags on `plan` and `recommend` (the workload, a measured `bench rank` file)."""
from __future__ import annotations

from typing import Any, Callable, TypeVar

import click

from dcpctl.plan.perf_report import DEFAULT_CONCURRENCY, DEFAULT_INPUT, DEFAULT_OUTPUT, Workload

F = TypeVar("F", bound=Callable[..., Any])

_OPTIONS = [
    click.option("--input-len", type=click.IntRange(min=1),
                 help=f"Performance: prompt tokens a request (default {DEFAULT_INPUT:,}); the TTFT's "
                      "prompt."),
    click.option("--output-len", type=click.IntRange(min=1),
                 help=f"Performance: output tokens a request (default {DEFAULT_OUTPUT:,}); TPOT is taken at "
                      "the mean decode context, input + output / 2."),
    click.option("--measured", type=click.Path(dir_okay=False),
                 help="A `dcpctl bench rank --format json` file of this plan: its measured compute replaces "
                      "the model's at its cells and calibrates the model's terms for the rest "
                      "(docs/recommend.md)."),
]


def perf_options(f: F) -> F:
    for opt in reversed(_OPTIONS):
        f = opt(f)
    return f


def workload(input_len: int | None, output_len: int | None, concurrency: int | None) -> Workload:
    return Workload(input_len or DEFAULT_INPUT, output_len or DEFAULT_OUTPUT,
                    concurrency or DEFAULT_CONCURRENCY)


def read(measured: str | None) -> Any:
    """The measured file (perf_measured.Measured), or None."""
    if not measured:
        return None
    from dcpctl.plan.perf_measured import read_measured
    return read_measured(measured)
