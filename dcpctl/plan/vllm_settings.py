"""What vLLM 0.34.0 makes of the `vllm serve` flags dcpctl passes through (plan/vllm_read.py reads them).

Each one that changes a value the plan resolves: `--dtype` (the model dtype, so KV `auto`; config/model.py
_resolve_auto_dtype), `--attention-config` (its `backend` is --attention-backend; engine/arg_utils.py
create_engine_config: the two are mutually exclusive), `--hf-overrides` (merged into config.json;
config/model.py), and the memory share (config/cache.py CacheConfig.resolved_gpu_memory_utilization: 1.0 with
the extensible KV cache, which config/vllm.py _resolve_extensible_kv_cache turns on by default on CUDA unless
--kv-cache-memory-bytes, --num-gpu-blocks-override or elastic EP size the cache otherwise, or
--disable-extensible-kv-cache turns it off, and keeps it off for a KV connector on a host without an IMEX
channel). The combinations vLLM refuses are in vllm_rules.py.
"""
from __future__ import annotations

from typing import Any

from dcpctl.plan import vllm_read
from dcpctl.plan.errors import UserError
from dcpctl.plan.vllm import DEFAULT_GPU_MEMORY_UTILIZATION, EXTENSIBLE_GPU_MEMORY_UTILIZATION, VLLM_VERSION

# config/model.py _STR_DTYPE_TO_TORCH_DTYPE: --dtype names -> the dtype vLLM runs
DTYPES = {"half": "float16", "float16": "float16", "bfloat16": "bfloat16", "float": "float32", "float32": "float32"}
# config/vllm.py _resolve_extensible_kv_cache: what sizes the cache without measuring memory (dest, why)
FIXED_SIZE = (("kv_cache_memory_bytes", "--kv-cache-memory-bytes sizes the KV cache"),
              ("num_gpu_blocks_override", "--num-gpu-blocks-override sizes the KV cache"),
              ("enable_elastic_ep", "elastic EP reuses the profiled KV cache size"))


def read(opts_or_groups: Any) -> dict[str, Any]:
    """The typed settings of the passed-through flags (a request's engine_args, or an options dict's)."""
    groups = opts_or_groups.get("engine_args") if isinstance(opts_or_groups, dict) else opts_or_groups
    return vllm_read.settings(tuple(tuple(str(x) for x in g) for g in groups or ()))


def config_backend(settings: dict[str, Any], typed: str | None) -> str | None:
    """--attention-config's backend (any case; `auto` is unset), refused beside --attention-backend as vLLM does."""
    cfg = settings.get("attention_config")
    be = cfg.get("backend") if isinstance(cfg, dict) else None
    if be is None:
        return typed
    if typed not in (None, "auto"):
        raise UserError("--attention-backend and --attention-config.backend are mutually exclusive in vLLM "
                        f"{VLLM_VERSION} (engine/arg_utils.py create_engine_config)")
    return vllm_read.backend_name(str(be))


def dtype(settings: dict[str, Any], config_dtype: str) -> tuple[str, str]:
    """(the dtype vLLM runs the model in, how it differs from the config's: "" when it does not): --dtype, else
    the config's, float32 cast down to bfloat16."""
    typed = str(settings.get("dtype") or "auto")
    if typed != "auto":
        return DTYPES[typed], f", set by --dtype {typed}"
    if config_dtype in ("float32", "float64"):
        return "bfloat16", f", cast from the config's {config_dtype} by config/model.py _resolve_auto_dtype"
    return config_dtype, ""


def memory_default(settings: dict[str, Any]) -> tuple[float, str]:
    """vLLM's gpu_memory_utilization when --gpu-memory-utilization is not given, and why."""
    off = [why for dest, why in FIXED_SIZE if settings.get(dest) not in (None, False)]
    if settings.get("enable_extensible_kv_cache") is False:
        off.append("--disable-extensible-kv-cache")
    if isinstance(settings.get("kv_transfer_config"), dict) and not settings.get("enable_extensible_kv_cache"):
        off.append("a KV connector registers the KV cache for transfers; dcpctl assumes hosts without an IMEX "
                   "channel, where vLLM keeps it off")
    if off:
        return DEFAULT_GPU_MEMORY_UTILIZATION, (f"default {DEFAULT_GPU_MEMORY_UTILIZATION} without the extensible KV "
                                                f"cache ({off[0]}; config/cache.py resolved_gpu_memory_utilization)")
    return EXTENSIBLE_GPU_MEMORY_UTILIZATION, (
        f"default {EXTENSIBLE_GPU_MEMORY_UTILIZATION}: the extensible KV cache (on by default on CUDA, "
        "config/vllm.py _resolve_extensible_kv_cache) sizes KV from the memory free after CUDA graph capture "
        "(config/cache.py resolved_gpu_memory_utilization)")


def hf_overrides(settings: dict[str, Any]) -> dict[str, Any]:
    """--hf-overrides as a mapping merged into config.json (a string names a function: not modelled, {})."""
    got = settings.get("hf_overrides")
    return got if isinstance(got, dict) else {}


def speculates(settings: dict[str, Any]) -> bool:
    """A --speculative-config that drafts (a method or a number of speculative tokens)."""
    spec = settings.get("speculative_config")
    return isinstance(spec, dict) and bool(spec.get("method") or spec.get("num_speculative_tokens"))


def full_cuda_graphs(settings: dict[str, Any]) -> bool:
    """Does vLLM capture FULL decode CUDA graphs (its default FULL_AND_PIECEWISE), not eager or piecewise only?"""
    cc = settings.get("compilation_config")
    mode = str(cc.get("cudagraph_mode") or "") if isinstance(cc, dict) else ""
    return not settings.get("enforce_eager") and mode.upper() not in ("NONE", "PIECEWISE")
