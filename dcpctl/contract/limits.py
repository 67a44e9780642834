"""Facts of the served checkpoint that the runtime needs beyond its weights: vocab, context, EOS."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dcpctl.contract.fields import LaunchConfigError

DEFAULT_MAX_POSITIONS = 4096    # max_position_embeddings when config.json has none


@dataclass(frozen=True)
class ModelLimits:
    vocab_size: int | None          # None: the path has no config.json (fake models in tests)
    max_position_embeddings: int
    eos_token_ids: tuple[int, ...]  # generation_config.json's eos_token_id, else config.json's


def read_model_limits(path: str | Path) -> ModelLimits:
    """The limits of the checkpoint at `path`, from the one config.json parser (plan/hf_config.py);
    a path without config.json (fake models in tests) gives empty limits."""
    from dcpctl.plan.hf_config import read_hf_config
    if not (Path(path) / "config.json").is_file():
        return ModelLimits(None, DEFAULT_MAX_POSITIONS, ())
    hc = read_hf_config(path)
    vocab, positions = hc.limits()
    return ModelLimits(vocab, positions, tuple(hc.eos_token_ids))


def served_context(limits: ModelLimits, context_length: int | None) -> int:
    """The context the server enforces: --context-length when given (never above the model's, as SGLang
    refuses), else the model's max_position_embeddings."""
    top = limits.max_position_embeddings
    if context_length is None:
        return top
    if not 0 < context_length <= top:
        raise LaunchConfigError(f"context_length ({context_length}) must be within 1..the model's "
                                f"max_position_embeddings ({top})")
    return context_length
