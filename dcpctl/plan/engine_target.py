"""An engine target: what dcpctl plans for one serving engine: its flags, rules and defaults, export line, version.

`dcpctl plan` asks "which target" once (plan/engines.py `target`) and then calls it; no module outside an
engine's own ones compares engine names. Torch- and click-free: a target names its extra CLI options and its
exporters by import path, which the CLI (cli/options.py) and launch (launch/exports.py) layers resolve.
Adding an engine target is one module that subclasses EngineTarget plus its line in plan/engines.py
(docs/structure.md: Adding an engine target).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from dcpctl.plan.engine_args import PassThrough

if TYPE_CHECKING:
    from dcpctl.plan.cost import Choice
    from dcpctl.plan.decisions import Decisions
    from dcpctl.plan.errors import Violation
    from dcpctl.plan.request import PlanRequest


class EngineTarget(ABC):
    """One engine dcpctl plans for. Class attributes are facts; methods are its rules."""

    name: str                     # --engine NAME, `dcpctl export NAME`
    label: str                    # how messages name it ("vLLM")
    version: str                  # the release whose code is the reference for its rules
    command: tuple[str, ...]      # what a user types to start its server ("vllm", "serve")
    memory_option: str            # its name for the share of GPU memory the plan sizes with
    port: int                     # its server's default HTTP port
    image: str                    # its container image (k8s)
    bundled_runtime: bool         # dcpctl's own runtime runs its plans (launch, generate, export torchrun)
    attention_backends: tuple[str, ...]  # --attention-backend names it takes
    cli_options: str | None       # `module:name` of the click options it adds to dcpctl's (its own spellings)
    option_keys: tuple[str, ...]  # the option keys those set (options() folds them into plan options)
    serve_args: str               # `module:function` (plan, ExportOptions, node_rank) -> one node's serve argv
    exporter: str                 # `module:function` (plan, ExportOptions) -> {file name: text}

    @property
    def release(self) -> str:
        return f"{self.label} {self.version}"

    @abstractmethod
    def options(self, opts: dict[str, Any]) -> dict[str, Any]:
        """Merged options in its vocabulary -> the plan options a request is built from."""

    def refuse_names(self, opts: dict[str, Any], chosen: "EngineTarget") -> None:
        """UserError for an option or name of this engine typed while `chosen` is the target (default: none)."""

    def prepare(self, req: "PlanRequest") -> "PlanRequest":
        """The request as this engine reads it before any rule (default: as it is)."""
        return req

    @abstractmethod
    def violations(self, req: "PlanRequest", with_model: bool) -> list["Violation"]:
        """Its topology rules (with_model False: only those that need no model)."""

    @abstractmethod
    def decide(self, req: "PlanRequest") -> "Decisions":
        """Every automatic choice it makes, each with its reason (and the kernel rules it refuses)."""

    @abstractmethod
    def candidates(self, req: "PlanRequest") -> list["Choice"]:
        """`recommend`: the DCP sizes, exchanges and Q replication it offers."""

    def spelling(self, req: "PlanRequest") -> str | None:
        """The planned deployment in its own flags, for the plan's header (None: dcpctl's flags are its own)."""
        return None

    @abstractmethod
    def split_flags(self, args: list[str], caller: dict[str, bool]) -> tuple[list[str], list[PassThrough], bool]:
        """A dcpctl command line -> (the tokens dcpctl parses, its server flags passed through as typed, whether a
        pasted launcher was unwrapped). `caller` maps dcpctl's option strings to whether each takes a value."""

    @abstractmethod
    def dest(self, token: str) -> str:
        """The setting (its parser's dest) a flag token (`--flag` or `--flag=value`) sets; the name if unknown."""

    @abstractmethod
    def check_passed(self, groups: tuple[tuple[str, ...], ...]) -> None:
        """UserError unless each passed-through flag (as a saved plan holds it) is one its server takes."""

    reads_pasted = False          # `dcpctl plan -- COMMAND ...` is read by parse_pasted

    def parse_pasted(self, argv: list[str]) -> tuple[dict[str, Any], list[PassThrough]]:
        """`dcpctl plan -- COMMAND ...` (reads_pasted): (its plan options, the flags passed through)."""
        raise NotImplementedError(f"{self.label} lines are read by split_flags, not after `--`")

    def check_export(self, req: "PlanRequest", fmt: str) -> None:
        """UserError when export `fmt` (its own, slurm or k8s) cannot run a plan of `req` as planned (default: none)."""
