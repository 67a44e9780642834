"""Facts of the served checkpoint that the runtime needs beyond its weights: vocab, context, EOS."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MAX_POSITIONS = 4096    # max_position_embeddings when config.json has none


@dataclass(frozen=True)
class ModelLimits:
    vocab_size: int | None          # None: the path has no config.json (fake models in tests)
    max_position_embeddings: int
    eos_token_ids: tuple[int, ...]  # generation_config.json's eos_token_id, else config.json's


def read_model_limits(path: str | Path) -> ModelLimits:
    """The limits of the checkpoint at `path` (text_config for wrappers); absent files give empty limits."""
    from dcpctl.plan.model import load_config_json
    p = Path(path)
    cfg = load_config_json(p) if (p / "config.json").is_file() else {}
    text = cfg.get("text_config", cfg)
    vocab = text.get("vocab_size")
    return ModelLimits(int(vocab) if vocab is not None else None,
                       int(text.get("max_position_embeddings", DEFAULT_MAX_POSITIONS)), _eos(p, cfg))


def _eos(path: Path, cfg: dict) -> tuple[int, ...]:
    gen = path / "generation_config.json"
    eos = json.loads(gen.read_text()).get("eos_token_id") if gen.is_file() else None
    if eos is None:
        eos = cfg.get("eos_token_id")
    if eos is None:
        return ()
    return tuple(int(t) for t in (eos if isinstance(eos, (list, tuple)) else [eos]))
