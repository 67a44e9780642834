"""The `dcpctl` command group: registers commands and turns user errors into one line + exit 2."""
from __future__ import annotations

import sys
from typing import Any

import click

from dcpctl import __version__, knobs
from dcpctl import console
from dcpctl.plan.errors import UserError

# command name -> "module:function"; imported only when run, so `dcpctl plan` never pulls in torch
COMMANDS = {
    "plan": "dcpctl.cli.plan:plan",
    "presets": "dcpctl.cli.presets:presets",
    "generate": "dcpctl.cli.generate:generate",
    "launch": "dcpctl.cli.launch:launch",
    "export": "dcpctl.cli.export:export",
    "recommend": "dcpctl.cli.recommend:recommend_cmd",
    "bench": "dcpctl.cli.bench:bench",
}


class LazyGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        """User mistakes become one line on stderr and exit status 2 (also under CliRunner)."""
        try:
            return super().invoke(ctx)
        except UserError as e:
            if knobs.get("DCPCTL_DEBUG"):
                console.err.print_exception(show_locals=True)
            console.error(str(e))
            ctx.exit(2)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(k for k in COMMANDS if _available(k))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS or not _available(name):
            return None
        module, attr = COMMANDS[name].split(":")
        return getattr(__import__(module, fromlist=[attr]), attr)


def _available(name: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(COMMANDS[name].split(":")[0]) is not None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "-V", "--version", prog_name="dcpctl")
def cli() -> None:
    """Plan, launch and run decode context parallelism (DCP) for MLA models.

    \b
    dcpctl plan      validate and explain a topology before any GPU is touched
    dcpctl presets   list and show the built-in models, hardware and recipes
    dcpctl generate  run the bundled striped-decode runtime on a prompt
    dcpctl launch    serve a model (or --dry-run: print the launch config and torchrun argv)
    dcpctl export    sglang / vllm / torchrun / slurm / k8s launch files for a real deployment
    dcpctl recommend pick a DCP size, backend and Q replication from a calibrated cost model
    dcpctl bench     measure: kernel, decode, exchange, capacity, serve

    Set DCPCTL_DEBUG=1 to see tracebacks.
    """


def main(argv: list[str] | None = None) -> Any:
    try:
        rv = cli.main(args=argv, prog_name="dcpctl", standalone_mode=False)
        sys.exit(rv if isinstance(rv, int) else 0)
    except click.exceptions.Abort:
        console.error("aborted")
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except UserError as e:
        if knobs.get("DCPCTL_DEBUG"):
            console.err.print_exception(show_locals=True)
        console.error(str(e))
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as e:  # our bug, not the user's: still one line unless debugging
        if knobs.get("DCPCTL_DEBUG"):
            console.err.print_exception(show_locals=True)
        else:
            console.error(f"internal error: {type(e).__name__}: {e} (set DCPCTL_DEBUG=1 for the traceback)")
        sys.exit(1)


if __name__ == "__main__":
    main()
