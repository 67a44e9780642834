"""`--device auto` (the default of generate, launch and bench decode): CUDA when a GPU is visible, else the
CPU; said once with the reason. `--device cpu|cuda` forces it."""
from __future__ import annotations

import click

from dcpctl import console

CHOICES = ("auto", "cpu", "cuda")


def device_option(help_extra: str = "") -> click.Option:
    return click.option("--device", type=click.Choice(CHOICES), default="auto", show_default=True,
                        help="auto: CUDA when a GPU is visible, else the CPU (said with the reason); cpu or "
                             "cuda forces it." + help_extra)


def visible_gpus() -> int:
    from dcpctl.plan.detect import probe
    p = probe()
    return len(p.gpus) if p else 0


def resolve_device(choice: str, ranks_here: int | None = None, gpus: int | None = None) -> str:
    """The device `choice` means on this machine; with `ranks_here`, auto takes CUDA only when that many GPUs
    are visible (the built-in two-rank model on a one-GPU machine runs on the CPU)."""
    if choice != "auto":
        return choice
    n = visible_gpus() if gpus is None else gpus
    if n == 0:
        console.info("--device auto: cpu (no CUDA GPU visible; --device cuda forces it)")
        return "cpu"
    if ranks_here is not None and ranks_here > n:
        console.info(f"--device auto: cpu ({ranks_here} ranks on this node, {n} CUDA GPU(s) visible; "
                     "--device cuda forces it)")
        return "cpu"
    console.info(f"--device auto: cuda ({n} CUDA GPU(s) visible; --device cpu forces the CPU)")
    return "cuda"
