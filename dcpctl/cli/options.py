"""Plan flags shared by plan/generate/launch (SGLang's names and aliases, each engine target's own,
docs/design.md section 8)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import click

from dcpctl import console
from dcpctl.cli.engine_flags import merge_engine_args, typed_engine_args
from dcpctl.cli.runtime_options import RUNTIME_KEYS, RUNTIME_OPTIONS
from dcpctl.plan import request as R
from dcpctl.plan.engines import TARGETS, all_backend_names, all_option_keys, target
from dcpctl.plan.errors import UserError, positive_ints  # noqa: F401 (the commands' flag lists)
from dcpctl.plan.resolve import hub_preset, merge_options, options_from_saved_plan
from dcpctl.refs import load_ref

F = Callable[..., Any]

_OPTIONS: list[Callable[[F], F]] = [
    click.option("--preset",
                 help="A deployment recipe from presets/ (see `dcpctl presets list`); flags override it."),
    click.option("--model-path", "--model", "model_path", type=click.Path(),
                 help="Hugging Face checkpoint directory (reads its config.json)."),
    click.option("--model-preset", "model",
                 help="A model preset name instead of --model-path (default: tiny)."),
    click.option("--hardware", help="auto (detect this machine, default), a profile (h100-8, h200-8, b200-8, "
                                    "b300-8, gb200-nvl72, gb300-nvl72, cpu) or a YAML file."),
    click.option("--tp-size", "--tensor-parallel-size", "tp_size", type=int,
                 help="Tensor parallel size (GPUs per engine, per pipeline stage)."),
    click.option("--dp-size", "--data-parallel-size", "dp_size", type=int,
                 help="Data parallel size (attention-DP replicas with --enable-dp-attention)."),
    click.option("--enable-dp-attention", is_flag=True, default=None,
                 help="Attention data parallelism inside TP (SGLang's older spelling of --attn-dp-size)."),
    click.option("--attn-dp-size", "--attention-data-parallel-size", "attn_dp_size", type=int,
                 help="Attention-DP replicas inside the TP group (= --dp-size N --enable-dp-attention)."),
    click.option("--dcp-size", "--decode-context-parallel-size", "dcp_size", type=int,
                 help="Decode context parallel size: ranks of one attention-TP group that stripe the KV."),
    click.option("--dcp-comm-backend", type=click.Choice(R.COMM_BACKENDS),
                 help="DCP exchange (default: decided)."),
    click.option("--dcp-replicate-q-proj/--no-dcp-replicate-q-proj", default=None,
                 help="Compute the DCP group's query locally (bf16/fp16 weights only)."),
    click.option("--ep-size", "--expert-parallel-size", "--ep", "ep_size", type=int,
                 help="MoE expert parallel size (divides tp)."),
    click.option("--pp-size", "--pipeline-parallel-size", "pp_size", type=int,
                 help="Pipeline parallel size."),
    click.option("--nnodes", type=int, help="Number of nodes."),
    click.option("--gpus-per-node", type=int, help="GPUs per node (default: from the hardware profile)."),
    click.option("--attention-backend", type=click.Choice(all_backend_names()),
                 help="Decode attention kernel (SGLang's names). The bundled runtime runs flashmla, "
                      "flashinfer, triton (ours) or torch_native when named, else the fastest in its "
                      "measured table per batch."),
    click.option("--decode-attention-backend", type=click.Choice(R.DECODE_ATTENTION_BACKENDS),
                 help="SGLang's name for the decode kernel; wins over --attention-backend for decode."),
    click.option("--kv-cache-dtype", type=click.Choice(R.KV_DTYPES + ("fp8",)),
                 help="KV cache dtype (auto: model dtype; fp8: vLLM's name)."),
    click.option("--page-size", type=int, help="KV page size in tokens per rank (default 1)."),
    click.option("--mem-fraction-static", type=float,
                 help="Fraction of GPU memory for weights + KV (default 0.85)."),
    click.option("--context-length", "--context-len", "context_len", type=int,
                 help="Context length (prompt + output): plan adds the concurrency that fits (beyond the "
                      "model's positions: refused, as SGLang does); launch enforces it."),
    click.option("--max-running-requests", type=int, help="Cap on concurrent requests."),
    click.option("--kda-state-fraction", type=float,
                 help="Share of the KV budget for KDA state (hybrids; 0.1)."),
    click.option("--speculative-algorithm", type=click.Choice(R.SPEC_ALGORITHMS),
                 help="Speculative decoding."),
    click.option("--speculative-num-draft-tokens", type=int,
                 help="Candidates verified per request per step."),
    click.option("--speculative-num-steps", type=int, help="Draft steps (EAGLE family; with none of the "
                                                           "three SGLang chooses steps 3, topk 1, 4 draft "
                                                           "tokens)."),
    click.option("--speculative-eagle-topk", type=int, help="Draft branching per step (EAGLE family)."),
    click.option("--speculative-draft-model-path", "--speculative-draft-model",
                 "speculative_draft_model_path", type=click.Path(), help="Draft checkpoint (STANDALONE)."),
    click.option("--disaggregation-mode", type=click.Choice(R.PD_MODES), help="PD disaggregation role."),
    click.option("--disaggregation-peer-dcp-size", type=int, help="DCP size of the other PD side."),
    click.option("--disaggregation-transfer-backend", type=click.Choice(R.PD_BACKENDS),
                 help="KV transfer backend."),
    click.option("--disaggregation-peer-page-size", type=int, help="Page size of the other PD side."),
    click.option("--disaggregation-peer-kv-cache-dtype", type=click.Choice(R.KV_DTYPES),
                 help="KV dtype of the peer."),
    click.option("--enable-hierarchical-cache", "--enable-hicache", "enable_hierarchical_cache", is_flag=True,
                 default=None, help="HiCache L2 host tier."),
    click.option("--hicache-storage-backend", help="HiCache L3 storage backend."),
    click.option("--enable-prefill-cp", is_flag=True, default=None,
                 help="Prefill context parallelism (not with DCP)."),
    click.option("--engine", type=click.Choice(tuple(TARGETS)),
                 help="Whose rules and defaults the plan applies: " + ", ".join(
                     f"{t.release}{' (default)' if i == 0 else ''}" for i, t in enumerate(TARGETS.values()))
                 + "."),
    # each engine's own names
    *[o for t in TARGETS.values() if t.cli_options for o in load_ref(t.cli_options)],
    *RUNTIME_OPTIONS,
]

PLAN_KEYS = ("preset", "model_path", "model", "hardware", "tp_size", "dp_size", "enable_dp_attention",
             "attn_dp_size", "dcp_size", "enable_prefill_cp",
             "dcp_comm_backend", "dcp_replicate_q_proj", "ep_size", "pp_size", "nnodes", "gpus_per_node",
             "attention_backend", "decode_attention_backend", "kv_cache_dtype", "page_size",
             "mem_fraction_static", "context_len", "max_running_requests", "kda_state_fraction",
             "speculative_algorithm", "speculative_num_draft_tokens", "speculative_num_steps",
             "speculative_eagle_topk", "speculative_draft_model_path", "disaggregation_mode",
             "disaggregation_peer_dcp_size", "disaggregation_transfer_backend",
             "disaggregation_peer_page_size", "disaggregation_peer_kv_cache_dtype",
             "enable_hierarchical_cache", "hicache_storage_backend", "engine", *all_option_keys(),
             *RUNTIME_KEYS)


def plan_options(f: F) -> F:
    for opt in reversed(_OPTIONS):
        f = opt(f)
    return f


def collect(ctx: click.Context, params: dict[str, Any], saved_plan: str | None = None) -> dict[str, Any]:
    """Flags + preset (+ saved plan) -> one options dict; only flags the user typed override. The engine flags
    typed (an `EngineCommand`'s pass-through) ride along as `engine_args`."""
    explicit = {k for k in PLAN_KEYS if ctx.get_parameter_source(k) == click.core.ParameterSource.COMMANDLINE}
    flags = {k: params.get(k) for k in PLAN_KEYS}
    typed = typed_engine_args(ctx)
    if saved_plan:
        opts = options_from_saved_plan(Path(saved_plan))
        check_option_types(ctx.command, opts, f"{saved_plan}: request")
        opts.update({k: flags[k] for k in explicit})
        if typed or opts.get("engine_args"):
            engine = target(opts.get("engine"))
            opts["engine_args"] = merge_engine_args(opts.get("engine_args") or [], typed, engine)
    else:
        opts = merge_options(flags, explicit, params.get("preset"))
        if typed:
            opts["engine_args"] = typed
    _say_hub_preset(opts)
    return opts


def _say_hub_preset(opts: dict[str, Any]) -> None:
    """A Hugging Face id dcpctl ships the config of is that model preset, offline: said once, here."""
    path = opts.get("model_path")
    name = hub_preset(str(path)) if path else None
    if name:
        console.info(f"--model-path {path}: not a local directory; using the shipped config of model preset "
                     f"{name} (offline; `dcpctl presets show {name}`)")


def check_option_types(command: click.Command, opts: dict[str, Any], where: str) -> None:
    """UserError unless every value has the type its flag takes (a saved plan is read back as the flags
    were)."""
    params = {p.name: p for p in command.params}
    for key, value in opts.items():
        p = params.get(key)
        if value is None or p is None:
            continue
        expected = _expected_type(p.type)
        if not _has_type(p.type, value):
            raise UserError(f"{where}.{key} must be {expected}, got {value!r}")


def _expected_type(t: click.ParamType) -> str:
    if isinstance(t, click.Choice):
        return "one of " + ", ".join(map(str, t.choices))
    return {click.types.BoolParamType: "true or false", click.types.IntParamType: "an integer",
            click.types.FloatParamType: "a number"}.get(type(t), "a string")


def _has_type(t: click.ParamType, value: Any) -> bool:
    if isinstance(t, click.Choice):
        return isinstance(value, str) and value in t.choices
    if isinstance(t, click.types.BoolParamType):
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if isinstance(t, click.types.IntParamType):
        return isinstance(value, int)
    if isinstance(t, click.types.FloatParamType):
        return isinstance(value, (int, float))
    return isinstance(value, str)
