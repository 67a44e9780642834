"""Run the bundled runtime under torchrun as a child process: progress bar, one-line rank errors."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dcpctl.cli import console
from dcpctl.launch.torchrun import runtime_env, torchrun_argv

PROGRESS = re.compile(r"^dcpctl-progress (\w+) (\d+)/(\d+)$")
RANK_ERROR = re.compile(r"^\[rank \S+\] ")


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


def run_torchrun(cfg: dict[str, Any], env: dict[str, str], quiet: bool = False) -> None:
    """Start every rank of this node and wait; raise RuntimeFailed with the first rank error."""
    argv = torchrun_argv(cfg)
    full_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
    debug = bool(os.environ.get("DCPCTL_DEBUG"))
    errors: list[str] = []
    other: list[str] = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console.err, transient=True, disable=quiet) as bar:
        tasks: dict[str, Any] = {}
        proc = subprocess.Popen(argv, env=full_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        for line in proc.stderr:
            line = line.rstrip("\n")
            m = PROGRESS.match(line)
            if m:
                what, done, total = m.group(1), int(m.group(2)), int(m.group(3))
                if what not in tasks:
                    tasks[what] = bar.add_task(f"{what} (rank 0)", total=total)
                bar.update(tasks[what], completed=done)
            elif RANK_ERROR.match(line):
                errors.append(line)
            elif debug:
                console.err.print(line, markup=False, highlight=False)
            else:
                other.append(line)
        rc = proc.wait()
    if rc != 0:
        if errors:
            raise RuntimeFailed(errors[0] + (f" (and {len(errors) - 1} more rank error(s))" if len(errors) > 1 else ""))
        tail = " | ".join(other[-3:]) if other else "no output"
        raise RuntimeFailed(f"torchrun exited with status {rc}: {tail}")
