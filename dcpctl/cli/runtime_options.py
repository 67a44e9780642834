"""Plan flags for the bundled runtime's numerics and speed (plan/runtime_choices.py decides; `plan` shows
each)."""
from __future__ import annotations

from typing import Any, Callable

import click

from dcpctl.plan import runtime_choices as RC

F = Callable[..., Any]

RUNTIME_OPTIONS: list[Callable[[F], F]] = [
    click.option("--fp8-gemm", type=click.Choice(RC.FP8_GEMM_CHOICES),
                 help="Block-FP8 GEMMs: auto (default: e4m3 activations, 1x128 groups, for prefill rows as "
                      "SGLang and vLLM; 16-bit activations for decode's few rows), w8a16 (16-bit activations "
                      "everywhere) or w8a8 (e4m3 activations everywhere)."),
    click.option("--blas", type=click.Choice(RC.BLAS_CHOICES),
                 help=f"torch's BLAS library on NVIDIA GPUs (default {RC.DEFAULT_BLAS}; keep: torch's own)."),
    click.option("--cublaslt-workspace-kib", type=click.IntRange(min=1),
                 help="cuBLASLt's workspace in KiB (default: torch's own size)."),
    click.option("--dist-timeout", type=click.IntRange(min=1),
                 help="Seconds a collective may wait before the run fails (default "
                      f"{RC.DEFAULT_DIST_TIMEOUT_S})."),
    click.option("--attention-table", type=click.Path(dir_okay=False),
                 help="A `dcpctl bench kernel --save-table` file that replaces the shipped attention backend "
                      "table."),
    click.option("--mla-configs", type=click.Path(dir_okay=False),
                 help="A `dcpctl bench kernel --sweep --format json` file of MLA tile configs per head "
                      "count."),
    click.option("--gemm16-table", type=click.Path(dir_okay=False),
                 help="A JSON file of 16-bit GEMM settings per shape that replace the shipped ones."),
]

RUNTIME_KEYS = ("fp8_gemm", "blas", "cublaslt_workspace_kib", "dist_timeout", "attention_table",
                "mla_configs", "gemm16_table")
