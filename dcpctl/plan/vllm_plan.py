"""The plan under `--engine vllm`: vLLM 0.34.0's rules and defaults, each with its source (dcpctl.plan.vllm).

Topology: vLLM's TP group is dcpctl's attention-TP group. `--data-parallel-size N` with
`--enable-expert-parallel` is attention DP (N engines of TP each, experts over all N*TP ranks:
dcpctl's tp N*TP, attention DP N, ep N*TP); without EP it is N whole engine replicas (dcpctl's dp
N). DCP reuses TP ranks (config/parallel.py `_validate_parallel_config`).
"""
from __future__ import annotations

from dcpctl.plan import vllm_backends, vllm_settings
from dcpctl.plan.cost import Choice
from dcpctl.plan.decisions import Decision, Decisions
from dcpctl.plan.errors import Violation, divisors
from dcpctl.plan.request import PlanRequest
from dcpctl.plan.kernels import is_kimi_k3
from dcpctl.plan.vllm import VLLM_VERSION

R1_DIMS = (128, 64, 128)  # qk_nope, qk_rope, v head dims tokenspeed_mla is specialised for


def vllm_tp(req: PlanRequest) -> int:
    """vLLM's --tensor-parallel-size: the attention-TP group of dcpctl's topology."""
    return req.topology.attn_tp


def topology_violations(req: PlanRequest, with_model: bool) -> list[Violation]:
    t, m = req.topology, req.model
    tp, dcp, pcp = vllm_tp(req), t.dcp_size, req.prefill_context_parallel_size
    out: list[Violation] = []
    if req.hardware.device != "cuda":
        out.append(Violation("vllm_cuda_only", f"dcpctl models vLLM {VLLM_VERSION} on CUDA GPUs, got --hardware "
                             f"{req.hardware.name} ({req.hardware.device}); name a GPU profile such as h200-8"))
    if pcp == 1 and tp % dcp:
        out.append(Violation("tp_dcp", f"tp_size={tp} must be divisible by dcp_size={dcp} (vLLM "
                             f"config/parallel.py _validate_parallel_config); valid dcp sizes: {divisors(tp)}"))
    elif pcp > 1 and dcp not in (1, pcp, tp * pcp):
        out.append(Violation("vllm_pcp", f"with PCP, DCP must be off, span PCP or span TP x PCP: TP={tp}, PCP={pcp}, "
                             f"DCP={dcp}; valid dcp sizes: {sorted({1, pcp, tp * pcp})} (config/parallel.py)"))
    elif pcp > 1 and dcp > 1 and with_model:
        out.append(Violation("vllm_pcp_dcp_dense", f"PCP ({pcp}) + DCP ({dcp}) supports sparse MLA models only: "
                             "vLLM's model runner refuses it at start-up for a dense MLA model "
                             "(v1/worker/gpu/pcp_manager.py PCPManager.validate_config)"))
    elif pcp > 1:
        out.append(Violation("vllm_pcp_layout", f"prefill context parallelism (pcp {pcp}) is valid in vLLM, but "
                             "dcpctl does not plan its rank layout; plan with pcp 1"))
    if with_model and dcp > 1 and not vllm_reads_mla(req):
        out += _gqa(req, tp, dcp)
    if with_model and m.num_heads % tp:
        out.append(Violation("heads", f"Total number of attention heads ({m.num_heads}) must be divisible by tensor "
                             f"parallel size ({tp}) (config/model.py verify_with_parallel_config); valid tp sizes: "
                             f"{divisors(m.num_heads)}"))
    if with_model and t.pp_size > m.num_layers:
        out.append(Violation("pp_layers", f"pp ({t.pp_size}) > num_hidden_layers ({m.num_layers})"))
    world = t.total_gpus * pcp
    if world % t.nnodes:
        out.append(Violation("nodes", f"--nnodes {t.nnodes} must evenly divide the total world size ({world}) = dp * "
                             f"pp * tp * pcp (engine/arg_utils.py create_engine_config); valid nnodes: "
                             f"{divisors(world)}"))
    elif t.gpus_per_node is not None and world // t.nnodes > t.gpus_per_node:
        out.append(Violation("node_fit", f"total GPUs ({world}) // nnodes ({t.nnodes}) = {world // t.nnodes} > "
                             f"gpus_per_node ({t.gpus_per_node}); need nnodes >= {-(-world // t.gpus_per_node)}"))
    return out


def vllm_reads_mla(req: PlanRequest) -> bool:
    """Does vLLM 0.34.0 run this config.json as MLA (ModelConfig.use_mla)? Not Kimi K3's wrapper config, whose
    MLA sizes sit under text_config (found by benchmarks/vllm/vllm_grid.py): vLLM applies its GQA rules to it."""
    return not is_kimi_k3(req)


def _gqa(req: PlanRequest, tp: int, dcp: int) -> list[Violation]:
    """config/model.py verify_with_parallel_config, for a model vLLM reads as GQA/MQA (kv heads = heads here)."""
    kv = req.model.num_heads
    if tp <= kv:
        return [Violation("vllm_gqa_dcp", f"Decode context parallelism for GQA/MQA requires --tensor-parallel-size "
                          f"({tp}) to be greater than the model's total number of KV heads ({kv}); vLLM "
                          f"{VLLM_VERSION} does not read this {req.model.architectures[0]} config as MLA")]
    if dcp > tp // kv:
        return [Violation("vllm_gqa_dcp", f"--decode-context-parallel-size ({dcp}) exceeds the maximum ({tp // kv}) "
                          f"for --tensor-parallel-size ({tp}) and {kv} KV heads")]
    return []


def decide(req: PlanRequest) -> Decisions:
    d = Decisions()
    c, pcp = req.topology.dcp_size, req.prefill_context_parallel_size
    d.items["dcp_comm_backend"] = Decision(req.dcp_comm_backend, "set by --dcp-comm-backend") \
        if req.dcp_comm_backend else Decision("ag_rs", _DEFAULT_BACKEND)
    d.items["dcp_replicate_q_proj"] = Decision(bool(req.dcp_replicate_q_proj), "set by --dcp-q-replicate") \
        if req.dcp_replicate_q_proj is not None else Decision(False, _DEFAULT_QREP)
    settings = vllm_settings.read(req.engine_args)
    kv = _kv_dtype(req, d)
    m = req.model
    sel = vllm_backends.select(req.hardware.sm, req.kv_cache_dtype, _user_backend(req), req.page_size,
                               m.kv_lora_rank + m.qk_rope_head_dim, m.qk_nope_head_dim, _r1_dims(req),
                               model_dtype(req))
    d.items["decode_attention_backend"] = Decision(sel.backend, sel.reason)
    d.items["page_size"] = Decision(sel.block_size, sel.block_reason)
    d.items["kv_cache_dtype"] = Decision(*kv)
    typed_interleave = req.cp_kv_cache_interleave_size
    interleave = 1 if typed_interleave is None else typed_interleave
    d.items["cp_kv_cache_interleave_size"] = Decision(
        interleave, "set by --cp-kv-cache-interleave-size" if typed_interleave is not None else
        "default 1: token i on DCP rank i % dcp, dcpctl's stripe rule (config/parallel.py)")
    default, why = vllm_settings.memory_default(settings)
    d.items["gpu_memory_utilization"] = Decision(req.mem_fraction_static, "set by --gpu-memory-utilization"
                                                 if req.mem_fraction_static != default else why)
    if vllm_reads_mla(req):
        d.items["gqa_dcp_limit"] = Decision(None, "MLA model: vLLM's GQA limit dcp <= tp // kv_heads does not apply "
                                                  "(config/model.py verify_with_parallel_config checks it only when "
                                                  "not use_mla)")
    _check(req, d, sel, interleave, c, pcp)
    return d


_DEFAULT_BACKEND = ("vLLM default ag_rs: all-gather + reduce-scatter (config/vllm.py VllmConfig.__post_init__ -> "
                    "config/parallel.py set_dcp_defaults; the DeepSeek and Kimi models set no DCP default, "
                    "model_executor/models/config.py)")
_DEFAULT_QREP = ("vLLM default off (config/parallel.py set_dcp_defaults; VLLM_DCP_Q_REPLICATE, when set, overrides "
                 "it in model_executor/models/deepseek_v2.py)")


def _user_backend(req: PlanRequest) -> str | None:
    return None if req.attention_backend == "auto" else req.attention_backend


def _r1_dims(req: PlanRequest) -> bool:
    m = req.model
    return (m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim) == R1_DIMS


def model_dtype(req: PlanRequest) -> str:
    """The dtype vLLM runs the model in: --dtype, else the config's, float32 cast down to bfloat16 on CUDA
    (config/model.py _resolve_auto_dtype: the platform's first supported dtype)."""
    return vllm_settings.dtype(vllm_settings.read(req.engine_args), req.model.dtype)[0]


def _kv_dtype(req: PlanRequest, d: Decisions) -> tuple[str, str]:
    user = req.kv_cache_dtype
    model, why = vllm_settings.dtype(vllm_settings.read(req.engine_args), req.model.dtype)
    if user == "auto":
        return model, f"auto: the model's dtype ({model}{why}; config/cache.py cache_dtype)"
    if user in ("float16", "bfloat16") and user != model:  # vLLM's model dtype, after its float32 cast
        ok = f"auto or {model}" if model in ("float16", "bfloat16") else "auto"
        d.violations.append(Violation("vllm_kv_float", f'kv_cache_dtype="{user}" is incompatible with dtype="{model}"'
                                      f"; use --kv-cache-dtype {ok} (config/vllm.py _reject_mismatched_float_kv_cache)"))
    return user, "set by --kv-cache-dtype"


def _check(req: PlanRequest, d: Decisions, sel: vllm_backends.Selection, interleave: int, c: int, pcp: int) -> None:
    add = d.violations.append
    if c > 1 and interleave == 0:
        add(Violation("vllm_interleave_zero", "cp_kv_cache_interleave_size 0 with DCP: block_size % 0 raises "
                      "ZeroDivisionError when the engine core starts (config/vllm.py validate_block_size)"))
    elif c > 1 and interleave < 0:
        add(Violation("vllm_interleave_negative", f"cp_kv_cache_interleave_size must be positive with DCP, got "
                      f"{interleave} (v1/attention/backends/utils.py get_dcp_local_seq_lens stripes by it)"))
    elif sel.backend is None:
        code = "vllm_backend_invalid" if _user_backend(req) else "vllm_no_backend"
        add(Violation(code, sel.reason))
    elif c > 1 and sel.block_size % interleave:
        add(Violation("vllm_interleave_block", f"block_size ({sel.block_size}) must be >= and divisible by "
                      f"cp_kv_cache_interleave_size ({interleave}) (config/vllm.py validate_block_size)"))
    elif c > 1 and interleave != 1 and sel.backend == "FLASHINFER_MLA":
        add(Violation("vllm_flashinfer_interleave", f"FlashInfer MLA native DCP requires cp_kv_cache_interleave_size=1; "
                      f"got {interleave} (v1/attention/backends/mla/flashinfer_mla.py)"))
    if pcp > 1 and c > 1 and d.value("dcp_comm_backend") != "ag_rs":
        add(Violation("vllm_pcp_a2a", "PCP + DCP requires dcp_comm_backend ag_rs (v1/worker/gpu/pcp_manager.py)"))
    if c == 1 and req.dcp_comm_backend == "a2a":
        d.warnings.append("--dcp-comm-backend a2a has no effect at dcp 1 (vLLM accepts it; no DCP exchange runs)")
    if c == 1 and interleave != 1 and req.cp_kv_cache_interleave_size is not None:
        d.warnings.append(f"--cp-kv-cache-interleave-size {interleave} has no effect at dcp 1 (vLLM accepts it)")
    if c == 1 and req.dcp_replicate_q_proj:
        d.warnings.append("--dcp-q-replicate has no effect at dcp 1 (model_executor/models/deepseek_v2.py enables "
                          "it only with decode_context_parallel_size > 1)")


def candidates(req: PlanRequest) -> list[Choice]:
    """`recommend --engine vllm`: vLLM's exchanges (ag_rs, a2a), each with and without Q replication."""
    out = [Choice(1, "none", False)]
    for c in divisors(vllm_tp(req))[1:]:
        out += [Choice(c, be, rq) for be in ("ag_rs", "a2a") for rq in (False, True)]
    return out
