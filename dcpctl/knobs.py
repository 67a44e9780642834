"""Every environment variable dcpctl reads or sets, declared once (docs/knobs.md); nothing else reads os.environ.

    knobs.get(name)          the typed value of a declared variable (its default when unset or empty)
    knobs.is_set(name)       whether it has a non-empty value
    knobs.put(name, value)   set one for this process and its children (KnobError for an undeclared name)
    knobs.drop(name)         unset it
    knobs.environ()          a copy of this process's environment, for a child process

What changes numerics or speed is not a variable: it is a launch-config field (`runtime`, docs/launch-config.md)
decided once by the plan.  The variables left are plumbing between the launcher and its ranks, install-time
paths, debug switches, and the variables of other programs (torchrun, CUDA, torch) that dcpctl reads or sets.
Torch-free and import-free, so `dcpctl plan` can load it (plan/ itself reads none of them).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

Kind = Literal["user", "debug", "plumbing", "install", "test", "torchrun", "foreign"]
KIND_MEANING = {
    "user": "a setting a user may export",
    "debug": "a debug switch: never changes what is computed, only what is shown or recorded",
    "plumbing": "set by the launcher for its ranks; not for users",
    "install": "where an optional kernel library is built from source",
    "test": "read by the GPU tests and device scripts only, never by the package",
    "torchrun": "set by torchrun for every rank",
    "foreign": "another program's variable that dcpctl reads or sets",
}


class KnobError(ValueError):
    """An undeclared variable, or a value that does not parse as its declared type."""


@dataclass(frozen=True)
class Knob:
    name: str
    type: type
    default: str | int | bool | None
    kind: Kind
    meaning: str


def _k(name: str, typ: type, default: str | int | bool | None, kind: Kind, meaning: str) -> Knob:
    return Knob(name, typ, default, kind, meaning)


KNOBS: dict[str, Knob] = {k.name: k for k in (
    _k("DCPCTL_DEBUG", bool, False, "debug", "show tracebacks (with locals in the CLI) instead of one-line errors"),
    _k("DCPCTL_UNFUSED", str, "", "debug", "decode-step fusions to turn off for an A/B (`name,...` or `all`; "
                                           "runtime/kernels/fusions.py lists them)"),
    _k("DCPCTL_STEP_TRACE", str, None, "debug", "file where rank 0 of a server records every loop turn's times"),
    _k("DCPCTL_LOOP_PROFILE", str, None, "debug", "file where rank 0 of a server writes a cProfile of its loop"),
    _k("DCPCTL_API_KEY", str, None, "user", "the bearer key of `dcpctl launch` and `bench serve`: set it instead of "
                                            "--api-key to keep the key out of `ps`; the ranks read it here, never "
                                            "from a file"),
    _k("DCPCTL_CACHE", str, None, "user", "folder for the built tiny checkpoint (default ~/.cache/dcpctl)"),
    _k("DCPCTL_LAUNCH_CONFIG", str, None, "plumbing", "the launch config YAML every rank reads"),
    _k("DCPCTL_SERVE", str, None, "plumbing", "the server options: a JSON file, or the JSON itself (serving ranks "
                                              "only)"),
    _k("DCPCTL_REQUESTS", str, None, "plumbing", "the requests JSON of a batch run (`dcpctl generate`)"),
    _k("DCPCTL_RESULT", str, None, "plumbing", "where rank 0 writes a batch run's result JSON"),
    _k("DCPCTL_LAUNCHER_PID", int, None, "plumbing", "the launcher's pid: a rank exits when it ends"),
    _k("DCPCTL_FLASHINFER_SDIST", str, None, "install", "FlashInfer's source release (tarball or folder) to JIT from"),
    _k("DCPCTL_FLASHINFER_WORK", str, "/tmp/dcpctl-flashinfer", "install", "where FlashInfer's source is unpacked"),
    _k("DCPCTL_FLASHMLA_SDIST", str, None, "install", "FlashMLA's source tarball to build the extension from"),
    _k("DCPCTL_FLASHMLA_WORK", str, "/tmp/dcpctl-flashmla", "install", "where FlashMLA is unpacked and built"),
    _k("DCPCTL_GPU_REPORT", str, None, "test", "folder where the GPU tests write their measured figures as JSON"),
    _k("RANK", int, 0, "torchrun", "this process's global rank"),
    _k("LOCAL_RANK", int, 0, "torchrun", "this process's rank on its node (its GPU)"),
    _k("LOCAL_WORLD_SIZE", int, 1, "torchrun", "ranks on this node: the FP8 precompile shares the node's CPUs "
                                                 "among them"),
    _k("CUBLASLT_WORKSPACE_SIZE", str, None, "foreign", "torch's cuBLASLt workspace in KiB (set from the launch "
                                                        "config's runtime.cublaslt_workspace_kib)"),
    _k("CUDA_HOME", str, None, "foreign", "the CUDA toolkit FlashInfer's JIT builds with"),
    _k("CUDA_PATH", str, None, "foreign", "the CUDA toolkit, where CUDA_HOME is unset"),
    _k("PATH", str, "", "foreign", "gains the toolkit's and ninja's folders for FlashInfer's JIT"),
    _k("TORCH_CUDA_ARCH_LIST", str, None, "foreign", "the GPU architectures FlashInfer's JIT compiles for"),
    _k("FLASHINFER_WORKSPACE_BASE", str, None, "foreign", "where FlashInfer's JIT keeps its cache"),
    _k("MAX_JOBS", str, None, "foreign", "parallel compile jobs of torch's extension builder (FlashMLA)"),
    _k("TRITON_INTERPRET", bool, False, "foreign", "Triton's CPU interpreter (tests): kernels skip libdevice"),
    _k("TRITON_CACHE_DIR", str, None, "foreign", "Triton's on-disk kernel cache (default ~/.triton/cache): the FP8 "
                                                 "precompile compiles into it, a later start loads from it"),
)}


def knob(name: str) -> Knob:
    if name not in KNOBS:
        raise KnobError(f"environment variable {name} is not declared in dcpctl/knobs.py")
    return KNOBS[name]


def raw(name: str) -> str:
    """The text of a declared variable ('' when unset)."""
    return os.environ.get(knob(name).name, "").strip()


def is_set(name: str) -> bool:
    return raw(name) != ""


def get(name: str) -> str | int | bool | None:
    """The typed value of a declared variable, its default when unset or empty."""
    k, text = knob(name), raw(name)
    if not text:
        return k.default
    if k.type is bool:                  # a switch: any text but 0/false/no/off turns it on
        return text.lower() not in ("0", "false", "no", "off")
    if k.type is int:
        try:
            return int(text)
        except ValueError:
            raise KnobError(f"${name}={text!r} is not an integer") from None
    return text


def put(name: str, value: str) -> None:
    os.environ[knob(name).name] = value


def setdefault(name: str, value: str) -> None:
    os.environ.setdefault(knob(name).name, value)


def drop(name: str) -> None:
    os.environ.pop(knob(name).name, None)


def environ() -> dict[str, str]:
    """This process's environment as a plain dict: what a child process inherits."""
    return dict(os.environ)
