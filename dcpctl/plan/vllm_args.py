"""vLLM's `vllm serve` flags under `--engine vllm`: the modelled ones mapped to plan options, the rest passed
through.

Every flag of vLLM 0.34.0's `vllm serve` is in dcpctl/data/engines/vllm-0.34.0.json (its names,
aliases, arity, type and choices, dumped from vLLM's own parser by benchmarks/vllm/dump_flags.py) and
read as vLLM reads it (plan/vllm_read.py). MODELLED maps the ones that change the plan to dcpctl's option
keys; any other flag of the table is accepted and kept for the export. `to_plan_options` turns
vLLM's parallel vocabulary into dcpctl's topology (dcpctl.plan.vllm_plan says how).
"""
from __future__ import annotations

from typing import Any

from dcpctl.plan import vllm_read
from dcpctl.plan.engine_args import PassThrough
from dcpctl.plan.errors import UserError
from dcpctl.plan.vllm import SGLANG_ONLY, VLLM_VERSION

# vLLM dest -> dcpctl option key (what the plan reads)
MODELLED = {
    "model": "model_path", "model_tag": "model_path", "tensor_parallel_size": "tp_size",
    "data_parallel_size": "dp_size", "pipeline_parallel_size": "pp_size",
    "decode_context_parallel_size": "dcp_size",
    "prefill_context_parallel_size": "prefill_context_parallel_size", "dcp_comm_backend": "dcp_comm_backend",
    "dcp_q_replicate": "dcp_replicate_q_proj", "cp_kv_cache_interleave_size": "cp_kv_cache_interleave_size",
    "enable_expert_parallel": "enable_expert_parallel", "nnodes": "nnodes", "block_size": "page_size",
    "kv_cache_dtype": "kv_cache_dtype", "attention_backend": "attention_backend",
    "max_model_len": "context_len", "gpu_memory_utilization": "mem_fraction_static",
    "max_num_seqs": "max_running_requests", }
INTS = ("tp_size", "dp_size", "pp_size", "dcp_size", "prefill_context_parallel_size",
        "cp_kv_cache_interleave_size", "nnodes", "page_size", "context_len", "max_running_requests")
# flags a launcher sets per node or per deployment: accepted, not carried into the plan
# dcpctl's vLLM-named options (cli/vllm_options.py) -> the plan option each one spells
RENAMED = {"dcp_q_replicate": "dcp_replicate_q_proj", "block_size": "page_size",
           "max_model_len": "context_len", "gpu_memory_utilization": "mem_fraction_static",
           "max_num_seqs": "max_running_requests"}
# vLLM's single-dash aliases of flags dcpctl already has: hidden options of their own, folded into the long
# form
ALIASES = {"tp_alias": ("-tp", "tp_size"), "dp_alias": ("-dp", "dp_size"), "pp_alias": ("-pp", "pp_size"),
           "dcp_alias": ("-dcp", "dcp_size"), "nnodes_alias": ("-n", "nnodes")}
OPTION_KEYS = ("enable_expert_parallel", "prefill_context_parallel_size", "cp_kv_cache_interleave_size",
               *RENAMED, *ALIASES)
PER_NODE = ("node_rank", "master_addr", "master_port", "headless", "data_parallel_address",
            "data_parallel_rpc_port", "data_parallel_size_local", "data_parallel_start_rank", "host", "port")


def parse_serve(argv: list[str]) -> tuple[dict[str, Any], list[PassThrough]]:
    """A pasted `vllm serve MODEL ...` argv (after `vllm serve`) -> (plan options, passed-through flags), read
    as vLLM reads it (plan/vllm_read.py); the per-node flags a launcher sets are dropped."""
    table = vllm_read.table()
    caller = {f: a.nargs != "0" for dest in MODELLED if (a := table.by_dest.get(dest)) for f in a.flags}
    mine, rest = vllm_read.split_line(argv, caller)
    opts: dict[str, Any] = {}
    i = 0
    while i < len(mine):
        tok = mine[i]
        if not tok.startswith("-"):
            if "model_path" in opts:
                raise UserError(f"vllm serve takes one model, got {opts['model_path']!r} and {tok!r}")
            opts["model_path"], i = tok, i + 1
            continue
        name, eq, inline = tok.partition("=")
        arg = table.lookup(name)
        assert arg is not None, name  # split_line gave dcpctl only the modelled flags
        if arg.nargs == "0":
            value: Any = not name.startswith(("--no-", "--disable-"))
            i += 1
        else:
            value, i = (inline, i + 1) if eq else (mine[i + 1], i + 2)
        opts[MODELLED[arg.dest]] = _typed(MODELLED[arg.dest], value, name)
    return opts, [p for p in rest if p.dest not in PER_NODE]


def check_passed(groups: tuple[tuple[str, ...], ...]) -> None:
    """UserError unless every group is a `vllm serve` flag with values vLLM takes (a saved plan may be
    edited)."""
    for g in groups:
        vllm_read.split_line(list(g), {})


def _typed(key: str, value: Any, flag: str) -> Any:
    if key in INTS and not isinstance(value, bool):
        try:
            return int(value)
        except ValueError:
            raise UserError(f"{flag} must be an integer, got {value!r}") from None
    if key == "mem_fraction_static":
        try:
            return float(value)
        except ValueError:
            raise UserError(f"{flag} must be a number, got {value!r}") from None
    return value


def refuse_vllm_names(opts: dict[str, Any], engine: str, backends: tuple[str, ...]) -> None:
    """vLLM's spellings, backends and options typed for another engine: one sentence naming what to use."""
    named = [k for k in (*RENAMED, *ALIASES) if opts.get(k) is not None]
    if named:
        flag = ALIASES[named[0]][0] if named[0] in ALIASES else "--" + named[0].replace("_", "-")
        target = RENAMED.get(named[0]) or ALIASES[named[0]][1]
        raise UserError(f"{flag} is vLLM's spelling; add --engine vllm, or use --{target.replace('_', '-')}")
    from dcpctl.plan import vllm_backends
    be, kv = opts.get("attention_backend"), opts.get("kv_cache_dtype")
    if be in vllm_backends.NAMES:
        raise UserError(f"--attention-backend {be} is a vLLM backend; add --engine vllm, or use one of "
                        f"{engine}'s: {', '.join(backends)}")
    vllm_only = [k
                 for k in ("prefill_context_parallel_size", "cp_kv_cache_interleave_size",
                           "enable_expert_parallel")
                 if opts.get(k) not in (None, False)] + (["kv_cache_dtype fp8"] if kv == "fp8" else [])
    if vllm_only:
        raise UserError(f"--{vllm_only[0].replace('_', '-')} is a vLLM option; add --engine vllm")


def fold(opts: dict[str, Any]) -> dict[str, Any]:
    """vLLM's names and aliases -> the plan option each one spells (a value typed twice must agree)."""
    out = dict(opts)
    pairs = list(RENAMED.items()) + [(k, long) for k, (_, long) in ALIASES.items()]
    for key, target in pairs:
        value = out.pop(key, None)
        if value is None:
            continue
        if out.get(target) not in (None, value):
            raise UserError(f"--{target.replace('_', '-')} ({out[target]}) and its vLLM spelling ({value}) "
                            "disagree")
        out[target] = value
    return out


def to_plan_options(opts: dict[str, Any]) -> dict[str, Any]:
    """vLLM's parallel options -> dcpctl's topology; SGLang-only options are refused (one sentence each)."""
    dpa = _dpa_spelling(opts)
    sglang = [k
              for k in SGLANG_ONLY
              if opts.get(k) not in (None, False) and not (dpa and k == "enable_dp_attention")]
    if sglang:
        raise UserError(f"--{sglang[0].replace('_', '-')} is an SGLang option that vLLM {VLLM_VERSION} has "
                        "no counterpart for; drop it or use --engine sglang")
    out = dict(opts)
    tp, dp, ep = out.get("tp_size") or 1, out.get("dp_size") or 1, out.pop("enable_expert_parallel", None)
    if dpa:  # SGLang's attention-DP spelling of a vLLM DP + EP deployment (a preset)
        return out
    if out.get("ep_size") not in (None, 1):
        raise UserError("vLLM has no expert-parallel size: --enable-expert-parallel spreads experts over "
                        f"all tp * dp ranks; got --ep-size {out['ep_size']}")
    if ep and dp > 1:  # DP + EP: dp attention replicas of tp ranks, experts over tp * dp ranks
        out.update(tp_size=tp * dp, dp_size=dp, enable_dp_attention=True, ep_size=tp * dp)
    elif ep:
        out["ep_size"] = tp
    return out


def _dpa_spelling(opts: dict[str, Any]) -> bool:
    """SGLang's tp T, dp N, --enable-dp-attention, ep T: the same deployment as vLLM's tp T/N, dp N, EP."""
    tp = opts.get("tp_size") or 1
    return (bool(opts.get("enable_dp_attention")) and opts.get("ep_size") == tp
            and not opts.get("enable_expert_parallel"))


def check_engine_names(opts: dict[str, Any]) -> None:
    """A backend, KV dtype or exchange name of another engine: one sentence naming vLLM's."""
    from dcpctl.plan import vllm, vllm_backends
    be, kv = opts.get("attention_backend"), opts.get("kv_cache_dtype")
    if be not in (None, "auto") and be not in vllm_backends.NAMES:
        raise UserError(f"--attention-backend {be} is an SGLang name; vLLM {VLLM_VERSION}'s MLA backends: "
                        f"{', '.join(vllm_backends.NAMES)}")
    if kv is not None and kv not in vllm.KV_DTYPES:
        raise UserError(f"--kv-cache-dtype {kv} is not a vLLM {VLLM_VERSION} choice dcpctl plans: "
                        f"{', '.join(vllm.KV_DTYPES)}")
    if opts.get("dcp_comm_backend") not in (None, *vllm.COMM_BACKENDS):
        raise UserError(f"--dcp-comm-backend {opts['dcp_comm_backend']} is SGLang's; vLLM's: "
                        f"{', '.join(vllm.COMM_BACKENDS)}")
