"""Everything a plan is made from, as one frozen value (the CLI and presets build it)."""
from __future__ import annotations

from dataclasses import dataclass

from dcpctl.plan.hardware import Hardware
from dcpctl.plan.model import ModelSpec
from dcpctl.plan.topology import Topology

DEFAULT_CHUNKED_PREFILL = 8192      # tokens per prefill chunk (-1: no chunking); the CLI's and the launch
                                    # config's default

COMM_BACKENDS = ("ag_rs", "a2a", "fi_a2a")
# float*: CPU only
KV_DTYPES = ("auto", "bf16", "bfloat16", "float16", "float32", "float64", "fp8_e4m3", "fp8_e5m2")
SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")
PD_MODES = ("null", "prefill", "decode")
PD_BACKENDS = ("mooncake", "nixl", "fake")
DECODE_ATTENTION_BACKENDS = ("auto", "fa3", "flashmla", "flashinfer", "triton", "trtllm_mla", "cutedsl_mla",
                             "tokenspeed_mla", "aiter", "torch_native")


@dataclass(frozen=True)
class PlanRequest:
    topology: Topology
    model: ModelSpec
    hardware: Hardware
    dcp_comm_backend: str | None = None  # None: let the planner decide
    dcp_replicate_q_proj: bool | None = None
    attention_backend: str = "auto"
    kv_cache_dtype: str = "auto"
    page_size: int | None = None  # None: decided (1, or what the decode kernel needs)
    mem_fraction_static: float = 0.85
    context_len: int | None = None
    max_running_requests: int | None = None
    kda_state_fraction: float = 0.1
    speculative_algorithm: str | None = None
    speculative_num_draft_tokens: int | None = None  # None: decided (dcpctl.plan.speculative)
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    draft_model: ModelSpec | None = None
    disaggregation_mode: str = "null"
    disaggregation_peer_dcp_size: int | None = None
    disaggregation_transfer_backend: str = "mooncake"
    disaggregation_peer_page_size: int | None = None
    disaggregation_peer_kv_cache_dtype: str | None = None
    enable_hierarchical_cache: bool = False
    hicache_storage_backend: str | None = None
    enable_prefill_cp: bool = False
    # --engine vllm (dcpctl.plan.vllm_plan): whose rules apply, and vLLM's own options
    engine: str = "sglang"
    prefill_context_parallel_size: int = 1
    cp_kv_cache_interleave_size: int | None = None
    engine_args: tuple[tuple[str, ...], ...] = ()  # `sglang serve` flags passed through, one token tuple per
    # flag the bundled runtime's numerics and speed settings (plan/runtime_choices.py; None: decided)
    fp8_gemm: str | None = None
    blas: str | None = None
    cublaslt_workspace_kib: int | None = None
    dist_timeout: int | None = None
    attention_table: str | None = None    # tuning tables that replace the shipped ones (FILE)
    mla_configs: str | None = None
    gemm16_table: str | None = None

    @property
    def chunked_prefill_size(self) -> int:
        """`--chunked-prefill-size` as passed through to the engine (`N` or `=N`), else the runtime's default;
        the one prefill chunk of a plan (its memory and its TTFT)."""
        for group in self.engine_args:
            flag, _, inline = group[0].partition("=") if group else ("", "", "")
            value = inline or (group[1] if len(group) > 1 else "")
            if flag == "--chunked-prefill-size" and value.lstrip("-").isdigit():
                return int(value)
        return DEFAULT_CHUNKED_PREFILL
