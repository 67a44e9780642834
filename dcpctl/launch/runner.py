"""Run the bundled runtime under torchrun as a child process: progress bar, one-line rank errors.

    run_torchrun(cfg, env)        batch (generate): wait for the end, raise RuntimeFailed on a rank error
    ServeProcess(argv, env)       serving: start, wait_ready() -> URL, wait(stop_event) -> exit status;
                                  a stop sends SIGTERM to torchrun, then kills its process group
Killed launcher (even SIGKILL): torchrun gets SIGTERM (parent-death signal) and every rank watches
the launcher's pid (runtime/lifeline.py), so nothing outlives it by more than a few seconds.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable

import yaml
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dcpctl import knobs
from dcpctl import console
from dcpctl.launch.torchrun import runtime_env, torchrun_argv
from dcpctl.runtime.lifeline import LAUNCHER_PID, parent_death_hook

PROGRESS = re.compile(r"^dcpctl-progress (\w+) (\d+)/(\d+)$")
RANK_ERROR = re.compile(r"^\[rank \S+\] ")
READY = re.compile(r"^dcpctl-ready (\S+)$")
STOPPED = "dcpctl-stopped"
NOTE = re.compile(r"^dcpctl-note (.+)$")   # a runtime choice and its reason (runtime/notes.py), shown once
STOP_GRACE_S = 10.0   # after SIGTERM, how long torchrun gets before its process group is killed
FAIL_WAIT_S = 15.0    # after a rank error, how long torchrun gets to stop the others and report by itself
ROOT_FIELD = re.compile(r"^\s*(rank|exitcode|traceback)\s*:\s*(.*)$")  # torchrun's "Root Cause" summary


class RuntimeFailed(Exception):
    """A rank failed; the message is that rank's own one-line error."""


def write_launch_files(workdir: Path, cfg: dict[str, Any], **json_files: Any) -> dict[str, str]:
    import json
    cfg_path = workdir / "launch.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False, default_flow_style=None))
    paths = {}
    for name, content in json_files.items():
        p = workdir / f"{name}.json"
        if content is not None:
            p.write_text(json.dumps(content))
        paths[name] = str(p)
    return runtime_env(str(cfg_path), **paths)


class StderrLog:
    """torchrun's stderr, line by line: progress, notes, rank errors, torchrun's "Root Cause" summary, the
    rest."""

    def __init__(self, debug: bool) -> None:
        self.debug = debug
        self.errors: list[str] = []
        self.other: list[str] = []       # the last lines that were none of the above
        self.root: dict[str, str] = {}   # torchrun's first observed failure: rank, exitcode, traceback
        self.notes: list[str] = []       # distinct runtime notes, in order (each printed once, whatever the
                                         # ranks)

    def feed(self, line: str) -> tuple[str, int, int] | None:
        """Record one line; a progress line comes back as (what, done, total) for the caller's bar."""
        m = PROGRESS.match(line)
        if m:
            return m.group(1), int(m.group(2)), int(m.group(3))
        note = NOTE.match(line)
        if note:
            if note.group(1) not in self.notes:
                self.notes.append(note.group(1))
                console.err.print(f"dcpctl: {note.group(1)}", markup=False, highlight=False, soft_wrap=True)
            return None
        field = ROOT_FIELD.match(line) if self.root else None
        if "Root Cause" in line:
            self.root["seen"] = "1"
        elif field:
            self.root.setdefault(field.group(1), field.group(2).strip())
        elif RANK_ERROR.match(line):
            self.errors.append(line)
        elif self.debug:
            console.err.print(line, markup=False, highlight=False)
        else:
            self.other = (self.other + [line])[-20:]
        return None

    def failure(self, returncode: int | None) -> str:
        """One line: the root cause (when no rank reported its own error first), else the first rank error."""
        root = self._root_cause()
        if root and not any(e.startswith(f"[rank {self.root['rank'].split()[0]}]") for e in self.errors):
            return root + (f"; then {self.errors[0]}" if self.errors else "")
        if self.errors:
            more = f" (and {len(self.errors) - 1} more rank error(s))" if len(self.errors) > 1 else ""
            return self.errors[0] + more
        tail = " | ".join(self.other[-3:]) if self.other else "no output"
        return f"torchrun exited with status {returncode}: {tail}"

    def _root_cause(self) -> str:
        if "rank" not in self.root:
            return ""
        rank = self.root["rank"].split()[0]
        how = self.root.get("traceback", "")
        how = how if how and not how.startswith("To "
                                                "enable") else f"exit code {self.root.get('exitcode', '?')}"
        return f"rank {rank} died: {how}"


def child_env(env: dict[str, str]) -> dict[str, str]:
    """torchrun's environment: ours, the runtime's variables, and this launcher's pid for the ranks to
    watch."""
    return {**knobs.environ(), **env, "PYTHONUNBUFFERED": "1", LAUNCHER_PID: str(os.getpid())}


class Bars:
    """Rank 0's `dcpctl-progress` lines as transient bars on stderr (one per kind: loading, requests)."""

    def __init__(self, quiet: bool = False) -> None:
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=console.err, transient=True, disable=quiet)
        self.tasks: dict[str, Any] = {}

    def __enter__(self) -> "Bars":
        self.progress.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.progress.stop()

    def step(self, what: str, done: int, total: int | None) -> None:
        if what not in self.tasks:
            self.tasks[what] = self.progress.add_task(f"{what} (rank 0)" if total else what, total=total)
        self.progress.update(self.tasks[what], completed=done)


def run_torchrun(cfg: dict[str, Any], env: dict[str, str], quiet: bool = False) -> None:
    """Start every rank of this node and wait; raise RuntimeFailed with the first rank error."""
    argv = torchrun_argv(cfg)
    full_env = child_env(env)
    log = StderrLog(debug=bool(knobs.get("DCPCTL_DEBUG")))
    with Bars(quiet) as bars:
        proc = subprocess.Popen(argv, env=full_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, preexec_fn=parent_death_hook())
        assert proc.stderr is not None
        try:
            for line in proc.stderr:
                progress = log.feed(line.rstrip("\n"))
                if progress:
                    bars.step(*progress)
            rc = proc.wait()
        finally:
            _reap(proc)
    if rc != 0:
        raise RuntimeFailed(log.failure(rc))


def _reap(proc: subprocess.Popen) -> None:
    """Never leave torchrun behind (say, the reader was interrupted): SIGTERM, then SIGKILL after the
    grace."""
    if proc.poll() is None:
        proc.terminate()  # torchrun forwards it to every rank
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()


class ServeProcess:
    """torchrun serving in its own session; stderr is parsed by a reader thread."""

    def __init__(self, argv: list[str], env: dict[str, str],
                 on_progress: Callable[..., None] | None = None) -> None:
        self.on_progress = on_progress   # called with (what, done, total) from the reader thread
        debug = bool(knobs.get("DCPCTL_DEBUG"))
        self.proc = subprocess.Popen(argv, env=child_env(env), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True,
                                     preexec_fn=parent_death_hook())
        self.url: str | None = None
        self.stopped_cleanly = False
        self.log = StderrLog(debug)
        self.ready = threading.Event()
        self.reader = threading.Thread(target=self._read, name="dcpctl-torchrun-stderr", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            line = line.rstrip("\n")
            m = READY.match(line)
            if m:
                self.url = m.group(1)
                self.ready.set()
            elif line == STOPPED:
                self.stopped_cleanly = True
            else:
                progress = self.log.feed(line)
                if progress and self.on_progress is not None:
                    self.on_progress(*progress)
        self.ready.set()  # torchrun is gone: wake a waiter

    def wait_ready(self, stop: threading.Event) -> str | None:
        """The URL once rank 0 serves; None when the process ended first or a stop was asked."""
        while not self.ready.wait(0.2):
            if stop.is_set():
                return None
        return self.url if self.proc.poll() is None else None

    def wait(self, stop: threading.Event) -> int:
        """Until torchrun exits (a rank died: RuntimeFailed) or `stop` is set (then stop all ranks)."""
        failed_at = None
        while self.proc.poll() is None and not stop.wait(0.2):
            if self.log.errors and failed_at is None:
                failed_at = time.monotonic()
            if failed_at is not None and time.monotonic() - failed_at > FAIL_WAIT_S:
                break  # torchrun tears the others down itself; make sure it cannot hang
        if self.proc.poll() is None:
            self.terminate()
        self.reader.join(5)
        if self.log.errors or (not stop.is_set() and self.proc.returncode != 0):
            raise RuntimeFailed(self.failure())
        if self.url is not None and not self.stopped_cleanly:
            raise RuntimeFailed(f"the ranks did not stop cleanly within {STOP_GRACE_S:.0f} s: "
                                f"{self.failure()}")
        return 0

    def failure(self) -> str:
        return self.log.failure(self.proc.returncode)

    def terminate(self, grace: float = STOP_GRACE_S) -> None:
        """SIGTERM to torchrun (it forwards to every rank), then SIGKILL to its process group."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # stragglers of this session only
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
