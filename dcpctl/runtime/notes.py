"""The runtime's own automatic choices, said once per process and text, with their reason.

Under the launcher ($DCPCTL_LAUNCH_CONFIG set: `dcpctl generate/launch` under torchrun) every rank prints
`dcpctl-note TEXT` on stderr and the launcher shows each distinct text once (launch/runner.StderrLog).
Elsewhere (benchmarks, tests, a process of its own) rank 0 prints `dcpctl: TEXT` on stderr."""
from __future__ import annotations

import sys

from dcpctl import knobs

PREFIX = "dcpctl-note "
_sent: set[str] = set()


def note_once(text: str) -> None:
    if text in _sent:
        return
    _sent.add(text)
    if knobs.is_set("DCPCTL_LAUNCH_CONFIG"):
        stderr_line(PREFIX + text)
    elif _rank() == 0:
        stderr_line(f"dcpctl: {text}")


def stderr_line(text: str) -> None:
    """One line on stderr in a single write: every rank shares torchrun's stderr pipe, and print() writes
    the text and its newline separately, so two ranks' lines could interleave into one (seen with notes)."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _rank() -> int:
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(knobs.get("RANK"))  # type: ignore[arg-type]    # torchrun sets it before the process group exists
