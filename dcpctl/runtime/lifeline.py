"""No rank outlives its launcher: a parent-death signal plus a watch on the launcher's pid.

    preexec = parent_death_hook()      Popen(preexec_fn=...): the child gets SIGTERM when its parent dies
    hold_on(env)                       in every rank: the same for torchrun, and a thread that watches
                                       $DCPCTL_LAUNCHER_PID; when that process ends it sends this rank
                                       SIGTERM (rank 0 then shuts the group down cleanly) and exits
                                       for good GRACE_S later
Linux only (prctl, pidfd); elsewhere both are no-ops and torchrun's own signal handling remains.
"""
from __future__ import annotations

import ctypes
import os
import select
import signal
import sys
import threading
import time
from typing import Callable

from dcpctl import knobs

LAUNCHER_PID = "DCPCTL_LAUNCHER_PID"
PR_SET_PDEATHSIG = 1
GRACE_S = 3.0      # after the launcher is gone: time for rank 0's clean shutdown before a hard exit
POLL_S = 0.25      # where pidfd is missing: how often the launcher's pid is checked


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def parent_death_hook(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A preexec_fn giving the child `sig` when the launcher dies (resolved here, before the fork)."""
    prctl, parent = _prctl(), os.getpid()
    if prctl is None:
        return None

    def hook() -> None:
        prctl(PR_SET_PDEATHSIG, sig)
        if os.getppid() != parent:  # the launcher died between fork and prctl
            os._exit(1)
    return hook


def hold_on() -> None:
    """In a rank: SIGTERM when torchrun dies, and a watch on the launcher named by $DCPCTL_LAUNCHER_PID."""
    prctl = _prctl()
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    pid = knobs.raw(LAUNCHER_PID)
    if pid.isdigit():
        threading.Thread(target=_watch, args=(int(pid),), name="dcpctl-lifeline", daemon=True).start()


def _watch(pid: int) -> None:
    wait_for_exit(pid)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(GRACE_S)
    os._exit(1)


def wait_for_exit(pid: int) -> None:
    """Block until process `pid` has ended (a zombie counts as ended)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):
        fd = -1
    if fd >= 0:
        select.select([fd], [], [])  # a pidfd turns readable when its process ends
        os.close(fd)
        return
    while _alive(pid):
        time.sleep(POLL_S)


def _alive(pid: int) -> bool:
    if not os.path.isdir("/proc"):
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False
