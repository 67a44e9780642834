"""The model `dcpctl launch` and `generate` serve without --model-path: the shipped trained tiny checkpoint.

    default_model() -> DefaultModel          path + one-line description, read from its training record
    describe(path) -> str | None             a checkpoint's description, if it carries a dcpctl record
    RECORD = "training.json"                 written by scripts/train_tiny.py next to the weights

Torch-free. The random tiny model (dcpctl.runtime.tiny) stays for tests that want random weights.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

RECORD = "training.json"
TRAINED_DIR = Path(__file__).resolve().parents[1] / "data" / "tiny-deepseek-stdlib"


@dataclass(frozen=True)
class DefaultModel:
    path: Path
    description: str

    @property
    def reason(self) -> str:
        return f"the built-in {self.description}, as no --model-path was given"


def describe(path: str | Path) -> str | None:
    """The `description` of a checkpoint's training record, or None (no record, or unreadable)."""
    try:
        record = json.loads((Path(path) / RECORD).read_text())
    except (OSError, ValueError):
        return None
    text = record.get("description") if isinstance(record, dict) else None
    return text if isinstance(text, str) else None


def default_model() -> DefaultModel:
    """The shipped trained checkpoint (a package-data directory; never written to)."""
    return DefaultModel(TRAINED_DIR, describe(TRAINED_DIR) or "tiny DeepSeek-V3-shaped model")
