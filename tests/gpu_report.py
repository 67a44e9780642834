"""Where the GPU tests put the figures they measure: $DCPCTL_GPU_REPORT/<name>.json, the folder made when
missing (`benchmarks/gpu.sh tests` sets it); nothing is written when it is unset."""
import json
from pathlib import Path
from typing import Any

from dcpctl import knobs


def report(name: str, doc: Any) -> Path | None:
    """Write doc as <folder>/<name>.json; the file written, or None when no folder is named."""
    folder = knobs.get("DCPCTL_GPU_REPORT")
    if not folder:
        return None
    path = Path(folder, f"{name}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2))
    return path
