"""Measured tuning tables: one JSON file per (kind, GPU) under dcpctl/tuning/<kind>/, read by one loader.

    load(kind, device, sm) -> Tuned      the table for this GPU, by one rule (below), and what was chosen
    write(path, kind, device, sm, command, commit, data)    what a tuning run (`--save-table`) writes

The device rule, the same for every kind:
  1. the table measured on this GPU (`device_name=NVIDIA_H200.json` for "NVIDIA H200": its name, spaces as
     `_`);
  2. else the table of the nearest GPU of the same architecture (same SM version; the first by name);
  3. else none: the kernel's built-in defaults.
`Tuned.how` says which, in a clause the caller prints once (runtime/notes.py) or puts in a plan decision.
A file: {"kind", "device", "sm", "command", "commit", "data"}; `data` is the kind's own table.  Torch-free.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
KINDS = ("attention", "mla_tiles", "gemm16", "fp8_gemm", "head_bmm", "perf")
HEADER = ("kind", "device", "sm", "command", "commit", "data")


class TuningTableError(ValueError):
    """A table file that is not one `write` makes."""


@dataclass(frozen=True)
class Tuned:
    data: Any | None        # the kind's table, None: built-in defaults
    device: str | None      # the GPU it was measured on
    how: str                # why this table (or none), a clause


def file_name(device: str) -> str:
    return "device_name=" + device.strip().replace(" ", "_") + ".json"


def same_gpu(a: str, b: str) -> bool:
    """One GPU under two spellings: case and a leading vendor name ignored ("NVIDIA H200" == "h200")."""
    strip = lambda s: s.lower().removeprefix("nvidia ").strip().replace("_", " ")  # noqa: E731
    return strip(a) == strip(b)


def read(path: str | Path) -> dict[str, Any]:
    """One table file, its header checked."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise TuningTableError(f"tuning table {path}: {e}") from None
    missing = [k for k in HEADER if not isinstance(doc, dict) or k not in doc]
    if missing:
        raise TuningTableError(f"tuning table {path} has no {', '.join(missing)}")
    return doc


@functools.lru_cache(maxsize=None)
def _shipped(kind: str) -> tuple[dict[str, Any], ...]:
    if kind not in KINDS:
        raise TuningTableError(f"no tuning tables of kind {kind!r}; kinds: {', '.join(KINDS)}")
    return tuple(read(p) for p in sorted((ROOT / kind).glob("device_name=*.json")))


@functools.lru_cache(maxsize=None)
def load(kind: str, device: str, sm: int | None) -> Tuned:
    """The `kind` table for the GPU named `device` (SM version `sm`, e.g. 90; None when not known)."""
    tables = _shipped(kind)
    for t in tables:
        if same_gpu(t["device"], device):
            return Tuned(t["data"], t["device"],
                         f"measured on this GPU ({t['device']}, commit {t['commit']})")
    for t in tables:
        if sm is not None and t["sm"] == sm:
            return Tuned(t["data"], t["device"], f"no {kind} table for {device}: the nearest sm_{sm} one, "
                                                 f"measured on {t['device']} (commit {t['commit']})")
    return Tuned(None, None, f"no {kind} table for {device}" + (f" or another sm_{sm} GPU" if sm else "")
                 + ": built-in defaults")


def source_commit() -> str:
    """The commit of this checkout (a tuning run's record), else the installed release."""
    import subprocess
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, timeout=10, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        from dcpctl import __version__
        return f"dcpctl {__version__}"


def write(path: str | Path, kind: str, device: str, sm: int | None, command: str, commit: str,
          data: Any) -> Path:
    """A table file as the loader reads it (a tuning run's `--save-table`)."""
    doc = {"kind": kind, "device": device, "sm": sm, "command": command, "commit": commit, "data": data}
    path = Path(path)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path
