"""`dcpctl bench tiles`: the tile sweep of ours (the Triton and Gluon MLA decode kernels) per kernel-head
count, written as the GPU's mla_tiles tuning table with `--save-table`.

Each head count is swept as `bench kernel --sweep` does (`kernel.sweep`: every candidate tile setting that
compiles and matches the torch reference, timed at 32 requests of 32K cached tokens); the fastest answers the
head counts it divides, the largest first, and the smallest swept count's answers every other count (the
table's multiple 1), as runtime/attention/kernel_config.py reads the table.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from dcpctl.plan.errors import UserError

BATCH, CONTEXT = 32, 32768


def tiles_table(best: dict[int, Any]) -> dict[str, Any]:
    """{heads: KernelConfig} -> an mla_tiles table: the largest head count first, the smallest as multiple
    1."""
    heads = sorted(best, reverse=True)
    rules = [[h if h != heads[-1] else 1, list(best[h])] for h in heads]
    return {"by_heads_multiple": rules, "fields": list(type(best[heads[0]])._fields)}


def sweep_heads(heads: list[int]) -> tuple[dict[int, Any], list[dict[str, Any]]]:
    """The fastest correct tile setting per head count on this GPU, and every candidate's record."""
    import torch

    from dcpctl.bench.kernel import Pool, sweep
    pool = Pool(BATCH * CONTEXT, torch.device("cuda"))
    log: list[dict[str, Any]] = []
    return {h: sweep(pool, h, log) for h in heads}, log


@click.command(name="tiles")
@click.option("--heads", default="64,32,16", show_default=True,
              help="Kernel-head counts to sweep (each rule of the table is one of them).")
@click.option("--save-table", type=click.Path(dir_okay=False), default=None,
              help="Write the picks as this GPU's mla_tiles table "
                   "(dcpctl/tuning/mla_tiles/device_name=<GPU>.json).")
def command(heads: str, save_table: str | None) -> None:
    """Sweep the tile settings of ours per kernel-head count at 32 requests x 32K and print the picks as JSON.

    `--save-table FILE` writes them as the mla_tiles tuning table the runtime's kernel config reads.  Needs a
    CUDA GPU.

    \b
    Example:
      dcpctl bench tiles --heads 64,32,16 --save-table dcpctl/tuning/mla_tiles/device_name=NVIDIA_H200.json
    """
    try:
        counts = sorted({int(h) for h in heads.split(",")}, reverse=True)
    except ValueError:
        raise UserError(f"--heads {heads}: expected a comma list of integers") from None
    import torch
    if not torch.cuda.is_available():
        raise UserError("dcpctl bench tiles needs a CUDA GPU (torch.cuda.is_available() is False).")
    from dcpctl.bench.decode import check_writable
    from dcpctl.bench.kernel import stdout_to_stderr
    if save_table:
        check_writable(Path(save_table), "--save-table")
    with stdout_to_stderr():   # Triton prints a failed candidate's PTX on stdout; keep the JSON clean
        best, log = sweep_heads(counts)
    table = tiles_table(best)
    click.echo(json.dumps({"device": torch.cuda.get_device_name(), "table": table, "sweep": log}, indent=1))
    if save_table:
        from dcpctl import tuning
        major, minor = torch.cuda.get_device_capability()
        tuning.write(save_table, "mla_tiles", torch.cuda.get_device_name(), major * 10 + minor,
                     "dcpctl " + " ".join(sys.argv[1:]), tuning.source_commit(), table)
