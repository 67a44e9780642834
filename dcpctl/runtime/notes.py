"""The runtime's own automatic choices, said once per process and text, with their reason.

Under the launcher ($DCPCTL_LAUNCH_CONFIG set: `dcpctl generate/launch` under torchrun) every rank prints
`dcpctl-note TEXT` on stderr and the launcher shows each distinct text once (launch/runner.StderrLog).
Elsewhere (benchmarks, tests, a process of its own) rank 0 prints `dcpctl: TEXT` on stderr."""
from __future__ import annotations

import os
import sys

PREFIX = "dcpctl-note "
_sent: set[str] = set()


def note_once(text: str) -> None:
    if text in _sent:
        return
    _sent.add(text)
    if os.environ.get("DCPCTL_LAUNCH_CONFIG"):
        print(PREFIX + text, file=sys.stderr, flush=True)
    elif _rank() == 0:
        print(f"dcpctl: {text}", file=sys.stderr, flush=True)


def _rank() -> int:
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", 0))    # torchrun sets it before the process group exists
