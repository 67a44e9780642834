"""`dcpctl presets`: the built-in models, hardware profiles and deployment recipes."""
from __future__ import annotations

import click
import yaml

from dcpctl import console
from dcpctl.plan import presets as P


@click.group()
def presets() -> None:
    """List and show built-in presets (model shapes, hardware profiles, deployment recipes)."""


@presets.command("list")
def list_() -> None:
    """One line per preset, grouped by kind."""
    rows = []
    for kind in P.KINDS:
        for name in P.names(kind):
            data = P.get(kind, name)
            desc = data.get("description") or data.get("hardware", {}).get("gpu_name", "")
            rows.append([kind, name, desc])
    console.out.print(console.table(None, ["kind", "name", "description"], rows))


@presets.command()
@click.argument("name")
def show(name: str) -> None:
    """Print one preset as YAML (use a deployment with `dcpctl plan --preset NAME`)."""
    kind, data = P.find(name)
    console.write_text(f"# {kind}/{name}\n" + yaml.safe_dump(data, sort_keys=False, width=120))
