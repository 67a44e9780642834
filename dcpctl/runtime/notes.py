"""Notes from the runtime to the launcher: `dcpctl-note TEXT` on stderr, once per process and text.

The launcher prints each distinct text once, however many ranks send it (launch/runner.StderrLog);
used for the runtime's own automatic choices (which local attention kernel runs, and why)."""
from __future__ import annotations

import sys

PREFIX = "dcpctl-note "
_sent: set[str] = set()


def note_once(text: str) -> None:
    if text not in _sent:
        _sent.add(text)
        print(PREFIX + text, file=sys.stderr, flush=True)
