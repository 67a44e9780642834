"""The vLLM release dcpctl models under `--engine vllm`, its option vocabulary, and the checks only dcpctl makes.

vLLM 0.34.0's `EngineArgs.create_engine_config` (which builds and validates `ParallelConfig`,
`ModelConfig`, `CacheConfig` and `VllmConfig`) plus its attention selector (`platforms/cuda.py`
`get_valid_backends` over each backend's `validate_configuration`, then the block size of
`platforms/interface.py` `update_block_size_for_backend`) is the reference for every verdict and
default under `--engine vllm` (benchmarks/vllm/vllm_grid.py compares them case by case). Every source
location below is relative to vllm/ in the release wheel.
"""
from __future__ import annotations

VLLM_VERSION = "0.34.0"

# config/parallel.py DCPCommBackend
COMM_BACKENDS = ("ag_rs", "a2a")
# config/cache.py CacheDType: the dense-MLA dtypes dcpctl plans (the quantized ds_mla/turboquant/... are not)
KV_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")
# config/cache.py CacheConfig.DEFAULT_GPU_MEMORY_UTILIZATION: --gpu-memory-utilization unset, no extensible KV cache
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
# config/cache.py resolved_gpu_memory_utilization: unset with the extensible KV cache (the default on CUDA)
EXTENSIBLE_GPU_MEMORY_UTILIZATION = 1.0
# config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE: what the backend's preferred block size starts from
DEFAULT_BLOCK_SIZE = 64

# SGLang options with no vLLM counterpart that dcpctl plans: refused under --engine vllm (one sentence, exit 2)
SGLANG_ONLY = ("enable_dp_attention", "attn_dp_size", "speculative_algorithm",
               "speculative_num_draft_tokens", "speculative_num_steps", "speculative_eagle_topk",
               "speculative_draft_model_path", "disaggregation_mode", "disaggregation_peer_dcp_size",
               "disaggregation_transfer_backend", "disaggregation_peer_page_size",
               "disaggregation_peer_kv_cache_dtype", "enable_hierarchical_cache", "hicache_storage_backend",
               "enable_prefill_cp", "kda_state_fraction")

# dcpctl's rejections that vLLM's config construction does not make, each with where vLLM meets it (if ever)
EXTRA_CHECKS: dict[str, str] = {
    "node_fit": "vLLM cannot count the GPUs of the other nodes",
    "weights_fit": "weights per rank larger than gpu_memory_utilization * memory fail at load "
                   "(v1/worker/gpu_worker.py determine_available_memory)",
    "pp_layers": "more pipeline stages than layers fail when the layers are partitioned "
                 "(distributed/utils.py get_pp_indices)",
    "vllm_pcp_layout": "dcpctl does not plan prefill-context-parallel rank layouts (vLLM's own PCP rules are "
                       "checked first, as vllm_pcp)",
    "vllm_no_backend": "the attention selector runs in the worker, after the model is built "
                       "(platforms/cuda.py get_attn_backend_cls): `No valid attention backend found`",
    "vllm_backend_invalid": "a selected --attention-backend is validated in the worker "
                            "(platforms/cuda.py get_attn_backend_cls: `Selected backend ... is not valid`)",
    "vllm_interleave_block": "block_size % cp_kv_cache_interleave_size is asserted by the engine core "
                             "(config/vllm.py validate_block_size, called from v1/engine/core.py)",
    "vllm_interleave_negative": "a negative interleave passes validate_block_size (block_size % -1 == 0); the DCP "
                                "stripe math it then reaches (v1/attention/backends/utils.py get_dcp_local_seq_lens) "
                                "assumes a positive size",
    "vllm_flashinfer_interleave": "FlashInfer MLA's metadata builder refuses DCP with an interleave size != 1 "
                                  "(v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAMetadataBuilder)",
}

# Rules only a running vLLM checks (the grid emulates the first three with vLLM's own classes; docs/vllm.md)
RUNTIME_RULES = (
    ("attention backend choice and block size", "v1/attention/selector.py + platforms/cuda.py "
     "_get_backend_priorities / get_valid_backends; platforms/interface.py update_block_size_for_backend"),
    ("block_size % cp_kv_cache_interleave_size == 0 with DCP", "config/vllm.py validate_block_size"),
    ("FlashInfer MLA with DCP needs interleave 1", "v1/attention/backends/mla/flashinfer_mla.py __init__"),
    ("PCP + DCP: sparse MLA models only, with dcp_comm_backend ag_rs", "v1/worker/gpu/pcp_manager.py "
     "PCPManager.validate_config"),
    ("VLLM_DCP_Q_REPLICATE overrides --dcp-q-replicate; Q replication acts only with dcp > 1",
     "model_executor/models/deepseek_v2.py DeepseekV2MLAAttention.__init__"),
    ("kernel packages present (FlashAttention MLA, FlashMLA, tokenspeed_mla)",
     "each backend's supports_combination (flash_attn_supports_mla, is_flashmla_dense_supported)"),
)
