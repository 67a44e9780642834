"""`dcpctl bench`: measured, not asserted (kernel, decode, serve, rank)."""
from __future__ import annotations

import importlib
import importlib.util

import click

# subcommand -> module exposing `command`; imported only when run
BENCHES = {
    "capacity": "dcpctl.bench.capacity",
    "kernel": "dcpctl.bench.kernel",
    "decode": "dcpctl.bench.decode",
    "exchange": "dcpctl.bench.exchange",
    "serve": "dcpctl.bench.serve",
    "tiles": "dcpctl.bench.tiles",
    "rank": "dcpctl.cli.bench_rank",
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
    """Benchmarks: `kernel` (local MLA decode kernel and exchanges; GPU), `decode` (striped decode step
    end to end for DCP sizes), `capacity` (context a fixed KV budget admits per DCP size), `serve`
    (an OpenAI-compatible server under load), `tiles` (our MLA decode kernel's tile sweep: the
    mla_tiles tuning table; GPU), `rank` (one rank of a plan at the real model's size; GPU).

    \b
    Examples:
      dcpctl bench decode --tp-size 2 --dcp-sizes 1,2 --batches 1 --contexts 256 --steps 2
      dcpctl bench capacity --dcp-sizes 1,2,4
      dcpctl bench serve --url http://127.0.0.1:30000
    """
