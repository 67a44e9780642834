"""Options (CLI flags, a deployment preset, a saved plan) -> PlanRequest. Flags win over presets."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from dcpctl.plan import presets
from dcpctl.plan.engines import all_option_keys, engine_options, target
from dcpctl.plan.errors import UserError
from dcpctl.plan.figures import calibrated
from dcpctl.plan.hardware import Hardware, resolve_hardware
from dcpctl.plan.model import ModelSpec, spec_from_config, spec_from_path
from dcpctl.plan.request import PlanRequest
from dcpctl.plan.topology import Topology

TOPOLOGY_KEYS = ("tp_size", "dp_size", "enable_dp_attention", "dcp_size", "ep_size", "pp_size", "nnodes",
                 "gpus_per_node")
REQUEST_KEYS = tuple(k for k in PlanRequest.__dataclass_fields__ if k not in ("topology", "model", "hardware",
                                                                              "draft_model"))
OTHER_KEYS = ("model", "model_path", "hardware", "speculative_draft_model_path", "description", "preset",
              "attn_dp_size", "calibration", "decode_attention_backend", "engine", *all_option_keys())
DEFAULT_MODEL = "tiny"
MODEL_KEYS = ("model_path", "model", "preset")  # any of these names a model; without them plan is
# topology-only topology-only plans: a stand-in that no model check reads (DeepSeek-V3's MLA shape,
# unquantized bf16, no architecture, so no model override applies); the plan lists what it skipped
# (planner.SKIPPED_WITHOUT_MODEL)
NO_MODEL = ModelSpec(name="(no model)", architectures=(), model_type="mla", hidden_size=7168, num_layers=61,
                     num_heads=128, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
                     qk_rope_head_dim=64, v_head_dim=128, vocab_size=0, intermediate_size=0,
                     moe_intermediate_size=0, n_routed_experts=0, num_experts_per_tok=0, n_shared_experts=0,
                     first_k_dense_replace=0, max_position_embeddings=0, dtype="bfloat16", quantization=None,
                     mla_layers=tuple(range(61)))


def merge_options(flags: dict[str, Any], explicit: set[str], preset: str | None) -> dict[str, Any]:
    """Defaults < preset < flags the user typed (`explicit`)."""
    if not preset:
        return dict(flags)
    recipe = presets.get("deployments", preset)
    unknown = sorted(set(recipe) - set(TOPOLOGY_KEYS) - set(REQUEST_KEYS) - set(OTHER_KEYS))
    if unknown:
        raise UserError(f"preset {preset}: unknown key(s) {unknown}")
    merged = dict(flags)
    for key, value in recipe.items():
        if key not in explicit and key != "description":
            merged[key] = value
    if "model_path" in explicit:
        merged.pop("model", None)
    if merged.get("dcp_size") == 1 and "dcp_size" in explicit and "dcp_comm_backend" not in explicit:
        # the recipe's exchange backend has nothing to exchange once the user asks for dcp 1: decide it afresh
        merged["dcp_comm_backend"] = flags.get("dcp_comm_backend")
    return merged


def has_model(opts: dict[str, Any]) -> bool:
    return any(opts.get(k) for k in MODEL_KEYS)


def hub_preset(path: str) -> str | None:
    """The model preset whose config a Hugging Face id names (`deepseek-ai/DeepSeek-V3.1`), when `path` is not
    a local directory; an id no preset ships is a UserError naming the presets."""
    if Path(path).exists() or path.count("/") != 1 or path.startswith((".", "/", "~")):
        return None
    for name in presets.names("models"):
        data = presets.get("models", name)
        if path.lower() in (str(x).lower() for x in (data.get("hf_repo"), *data.get("hf_aliases", ()))):
            return name
    ids = ", ".join(f"{presets.get('models', n).get('hf_repo')} ({n})" for n in presets.names("models")
                    if presets.get("models", n).get("hf_repo"))
    raise UserError(f"--model-path {path} is not a local directory and dcpctl ships no config for that id "
                    f"(presets: {ids}); download its config.json and pass the directory")


def model_from_options(opts: dict[str, Any]) -> ModelSpec:
    if opts.get("model_path"):
        preset = hub_preset(str(opts["model_path"]))
        if preset is None:
            _check_model_path(str(opts["model_path"]))
            return spec_from_path(opts["model_path"])
        return _preset_spec(preset, f"model preset {preset} (config of {opts['model_path']}, offline)")
    name = opts.get("model") or DEFAULT_MODEL
    return _preset_spec(name, f"model preset {name}")


def _preset_spec(name: str, source: str) -> ModelSpec:
    data = presets.get("models", name)
    spec = spec_from_config(data["config"], name=name, source=source)
    spec.extra["hf_repo"] = data.get("hf_repo")
    return spec


def _check_model_path(path: str) -> None:
    """A missing --model-path named like a model preset is the preset the user meant."""
    if Path(path).exists():
        return
    name = Path(path).name.lower()
    if name in presets.names("models"):
        raise UserError(f"--model-path {path} does not exist; did you mean --model-preset {name}? "
                        "(--model is an alias of --model-path)")


def _attn_dp(opts: dict[str, Any]) -> dict[str, Any]:
    """--attn-dp-size N is SGLang's newer spelling of --dp-size N --enable-dp-attention."""
    n = opts.get("attn_dp_size")
    if n is None:
        return opts
    dp = opts.get("dp_size")
    if dp not in (None, 1, n) or (dp == n and n > 1 and not opts.get("enable_dp_attention")):
        raise UserError(f"--attn-dp-size ({n}) and --dp-size ({dp}) cannot both be > 1: SGLang runs either "
                        "attention-DP replicas inside TP or whole engine replicas")
    return {**opts, "dp_size": n, "enable_dp_attention": n > 1 or bool(opts.get("enable_dp_attention"))}


def request_from_options(opts: dict[str, Any], model: ModelSpec | None = None) -> PlanRequest:
    """The PlanRequest of merged options; `model` (NO_MODEL for a topology-only plan) replaces the options'
    model."""
    hardware: Hardware = resolve_hardware(opts.get("hardware") or "auto", presets.hardware_profiles())
    if opts.get("calibration"):   # measured figures replace the profile's (plan's hardware section says so)
        hardware = calibrated(hardware, Path(opts["calibration"]))
    opts = _engine_args(_attn_dp(engine_options(opts)))  # the engine's vocabulary -> plan options
                                                         # (plan/engines.py)
    topo = {k: opts[k] for k in TOPOLOGY_KEYS if opts.get(k) is not None}
    topology = Topology(**topo)
    draft = None
    if opts.get("speculative_draft_model_path"):
        draft = spec_from_path(opts["speculative_draft_model_path"])
        draft.extra["path"] = opts["speculative_draft_model_path"]
    fields = {k: opts[k] for k in REQUEST_KEYS if opts.get(k) is not None}
    _check_ranges(fields)
    return PlanRequest(topology=topology, model=model or model_from_options(opts), hardware=hardware,
                       draft_model=draft, **fields)


def _engine_args(opts: dict[str, Any]) -> dict[str, Any]:
    """SGLang's --decode-attention-backend is the plan's decode kernel; the passed-through flags are checked
    again by the engine (a saved plan's may have been edited) and frozen."""
    out = dict(opts)
    if opts.get("decode_attention_backend"):
        out["attention_backend"] = opts["decode_attention_backend"]
    groups = opts.get("engine_args") or ()
    if not isinstance(groups, (list, tuple)) or not all(isinstance(g, (list, tuple)) and g for g in groups):
        raise UserError(f"engine_args must be a list of flag token lists, got {groups!r}")
    out["engine_args"] = tuple(tuple(str(x) for x in g) for g in groups)
    target(opts.get("engine")).check_passed(out["engine_args"])
    return out


def _check_ranges(f: dict[str, Any]) -> None:
    for key in ("mem_fraction_static", "kda_state_fraction"):
        if key in f and (not isinstance(f[key], (int, float)) or not 0 < f[key] <= 1):
            raise UserError(f"--{key.replace('_', '-')} must be in (0, 1], got {f[key]!r}")
    for key in ("page_size", "context_len", "max_running_requests", "disaggregation_peer_dcp_size",
                "disaggregation_peer_page_size", "speculative_num_draft_tokens", "speculative_num_steps",
                "speculative_eagle_topk"):
        if key in f and (not isinstance(f[key], int) or f[key] < 1):
            raise UserError(f"--{key.replace('_', '-')} must be a positive integer, got {f[key]!r}")


def options_from_saved_plan(path: Path) -> dict[str, Any]:
    """A plan saved with `dcpctl plan -o plan.yaml` carries the options that made it."""
    from dcpctl.plan.yamlio import read_yaml
    data = read_yaml(path)
    if "request" not in data:
        raise UserError(f"{path} is not a saved dcpctl plan (no 'request' key)")
    req = data["request"]
    if not isinstance(req, dict):
        raise UserError(f"{path}: 'request' must be a mapping of plan options, not {type(req).__name__}")
    unknown = sorted(str(k) for k in set(req) - set(TOPOLOGY_KEYS) - set(REQUEST_KEYS) - set(OTHER_KEYS))
    if unknown:
        raise UserError(f"{path}: unknown plan option(s) {unknown} under 'request'")
    return dict(req)
