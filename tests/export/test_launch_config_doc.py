"""docs/launch-config.md documents exactly the keys of the LaunchConfig and ServeOptions dataclasses."""
import pathlib
import re

import yaml

from dcpctl.contract.fields import key_paths
from dcpctl.contract.launch_config import LaunchConfig
from dcpctl.contract.serve import ServeOptions

DOC = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "launch-config.md").read_text()
BLOCKS = re.findall(r"```yaml\n(.*?)```", DOC, re.S)


def _paths(d: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in d.items():
        out.append(prefix + k)
        if isinstance(v, dict):
            out += _paths(v, f"{prefix}{k}.")
    return out


def test_launch_config_block_has_every_field():
    # read at parse time, not written
    fields = [p for p in key_paths(LaunchConfig) if not p.startswith("limits")]
    assert sorted(_paths(yaml.safe_load(BLOCKS[0]))) == sorted(fields)


def test_serve_block_has_every_field_and_its_defaults():
    doc = yaml.safe_load(BLOCKS[1])
    assert sorted(doc) == sorted(key_paths(ServeOptions))
    want = {k: list(v) if isinstance(v, tuple) else v for k, v in ServeOptions().__dict__.items()}
    assert doc == want
