"""MLA model families: one table from config.json's model_type / architectures to its config parse and runtime
model.

Read by the plan (plan/hf_config.py: is this a model dcpctl plans, whose transformers defaults fill its absent
keys; the exports: does an engine load it with --trust-remote-code) and by the runtime
(runtime/models/config.py: does the bundled runtime run it; runtime/models/loader.py: which builder makes its
model). Torch-free: a family names its runtime model by import path, resolved only in the runtime.
Adding an MLA family is one model file and one line of FAMILIES (docs/structure.md: Adding an MLA family).
"""
from __future__ import annotations

from dataclasses import dataclass

from dcpctl.plan.hf_defaults import KIMI_LINEAR, V2, V3

# the runtime's builders (module:function), each `build(load: runtime.models.build.ModelLoad) -> model`
DEEPSEEK_BUILD = "dcpctl.runtime.models.loader:load_deepseek"
DEEPSEEK_CONFIG = "dcpctl.runtime.models.config:mla_config"


@dataclass(frozen=True)
class Family:
    """One MLA model family: how a config.json names it, whose defaults it takes, what runs it."""

    name: str
    model_types: tuple[str, ...]    # config.json model_type values (the language model's, under a wrapper)
    architectures: tuple[str, ...]  # config.json architectures that name it exactly
    hf_defaults: str                # the transformers config class whose defaults fill absent keys
                                    # (hf_defaults.py)
    build: str | None = None        # runtime builder `module:function`; None: planned, not run by the bundled
                                    # runtime
    mla_config: str | None = None   # runtime `module:function` HfConfig -> MlaConfig (its MLA part)
    remote_code: bool = False       # engines load its checkpoints with --trust-remote-code
    kda: bool = False               # its layers may be KDA (linear attention) as well as MLA
    contains: str | None = None     # fallback: any architecture holding this word (planned as a V3-shaped
                                    # model)


FAMILIES: tuple[Family, ...] = (
    Family("deepseek_v2", ("deepseek_v2",), ("DeepseekV2ForCausalLM",), V2, DEEPSEEK_BUILD, DEEPSEEK_CONFIG),
    Family("deepseek_v3", ("deepseek_v3",), ("DeepseekV3ForCausalLM",), V3, DEEPSEEK_BUILD, DEEPSEEK_CONFIG),
    Family("kimi_k2", ("kimi_k2",), (), V3, DEEPSEEK_BUILD, DEEPSEEK_CONFIG, remote_code=True),
    Family("kimi_linear", ("kimi_linear",), ("KimiLinearForCausalLM",), KIMI_LINEAR,
           "dcpctl.runtime.models.kimi_linear:build", "dcpctl.runtime.models.kimi_config:mla_part",
           remote_code=True, kda=True),
    Family("kimi_k3", ("kimi_k3",), ("KimiK3ForConditionalGeneration",), V3, remote_code=True),
    Family("deepseek_other", (), (), V3, contains="Deepseek"),
    Family("kimi_other", (), (), V3, remote_code=True, contains="Kimi"),
)
MODEL_TYPES = tuple(sorted(t for f in FAMILIES for t in f.model_types))
RUNTIME_MODEL_TYPES = tuple(sorted(t for f in FAMILIES if f.build for t in f.model_types))


def family_of(model_type: str, architectures: tuple[str, ...]) -> Family | None:
    """The family a config.json names: by its model_type (transformers picks the config class by it), else by
    an architecture, else by a word an architecture holds; None: not a model dcpctl knows."""
    return (next((f for f in FAMILIES if model_type in f.model_types), None)
            or next((f for f in FAMILIES if any(a in f.architectures for a in architectures)), None)
            or next((f for f in FAMILIES if f.contains and any(f.contains in a for a in architectures)),
                    None))


def remote_code(model_type: str, architectures: tuple[str, ...]) -> bool:
    """Does an engine load this model with --trust-remote-code (its family's code is not in transformers)?"""
    f = family_of(model_type, architectures)
    return f is not None and f.remote_code
