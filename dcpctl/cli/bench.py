"""`dcpctl bench`: measured, not asserted (kernel, decode, serve)."""
from __future__ import annotations

import importlib
import importlib.util

import click

# subcommand -> module exposing `command`; imported only when run
BENCHES = {
    "capacity": "dcpctl.bench.capacity",
    "kernel": "dcpctl.bench.kernel",
    "decode": "dcpctl.bench.decode",
    "serve": "dcpctl.bench.serve",
}


class BenchGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(k for k, m in BENCHES.items() if importlib.util.find_spec(m) is not None)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.list_commands(ctx):
            return None
        return importlib.import_module(BENCHES[name]).command


@click.group(cls=BenchGroup)
def bench() -> None:
    """Benchmarks: `kernel` (local MLA decode kernel and exchanges), `decode` (striped decode step
    end to end for DCP sizes), `serve` (an OpenAI-compatible server under load)."""
