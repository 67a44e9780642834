"""The `--picture FILE` option, the optional-extra check and PNG/SVG saving; matplotlib is imported on first
use."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Callable

import click

from dcpctl import console
from dcpctl.plan.errors import UserError

FORMATS = {".png": "png", ".svg": "svg"}
EXTRA = "pip install 'dcpctl[plot]'"


def check_path(path: str) -> str:
    """The format of a picture path (png or svg, by extension), or a UserError naming the choices."""
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise UserError(f"--picture {path}: the file name must end in .png or .svg (the format is read from "
                        "it)")
    if importlib.util.find_spec("matplotlib") is None:
        raise UserError(f"--picture needs matplotlib, an optional extra: {EXTRA}")
    return fmt


def _checked(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None:
        check_path(value)
        _check_writable(Path(value))
    return value


def _check_writable(path: Path) -> None:
    """Fail while parsing, not after a plan or a benchmark has run."""
    existed = path.exists()
    try:
        with path.open("ab"):
            pass
    except OSError as e:
        raise UserError(f"cannot write --picture {path}: {e.strerror or e}") from None
    if not existed:
        path.unlink()


def picture_option(what: str) -> Callable[[Any], Any]:
    """`--picture FILE` for a command; the path is checked while the flags are parsed, before any work."""
    return click.option("--picture", type=click.Path(dir_okay=False), callback=_checked,
                        help=f"Also draw {what} to FILE (.png or .svg; needs {EXTRA}).")


def new_figure(width_in: float, height_in: float, constrained: bool = False) -> Any:
    """A matplotlib Figure on the Agg canvas: no display, no pyplot global state."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise UserError(f"--picture needs matplotlib, an optional extra: {EXTRA}") from None
    return Figure(figsize=(width_in, height_in), layout="constrained" if constrained else None)


def save(fig: Any, path: str) -> None:
    """Write the figure as PNG or SVG by the path's extension."""
    fmt = check_path(path)
    try:
        fig.savefig(path, format=fmt, dpi=150, facecolor="white")
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None
    console.info(f"saved picture to {path}")
