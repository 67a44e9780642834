"""Typed launch configs for tests: from a test's plain dict, parsed the way the worker parses YAML."""
from dataclasses import replace

from dcpctl.contract.fields import parse_section
from dcpctl.contract.launch_config import Decisions, LaunchConfig, PDLaunchConfig, parse_launch_config

BASE = {"dcp_comm_backend": "ag_rs", "dcp_replicate_q_proj": False, "lse_base": "e"}


def typed(d: dict) -> Decisions:
    """Decisions from a short dict (the unset keys at their dcp-1 values)."""
    return parse_section(Decisions, BASE | d, "decisions")


def config(d: dict, eos: int | None = None) -> LaunchConfig | PDLaunchConfig:
    """parse_launch_config(d); `eos` replaces the checkpoint's EOS ids."""
    cfg = parse_launch_config(d)
    if eos is not None:
        cfg = replace(cfg, limits=replace(cfg.limits, eos_token_ids=(eos,)))
    return cfg
