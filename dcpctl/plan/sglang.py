"""The SGLang release dcpctl models, and which of dcpctl's rejections SGLang's arguments cannot see.

SGLang 0.5.23's `prepare_server_args` + `resolve_once` + `check_server_args` is the reference for
every verdict and default (benchmarks/sglang/grid.py compares them case by case). A violation code in
EXTRA_CHECKS is a rejection SGLang's argument resolution does not make; its text says why, and
where SGLang meets the failure later. Every other code is one SGLang rejects at resolution too.
"""
from __future__ import annotations

SGLANG_VERSION = "0.5.23"

# SGLang's --kv-cache-dtype choices that dcpctl plans (arg_groups/choices.py; mxfp8/nvfp4 are not modelled).
SGLANG_KV_DTYPES = ("auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2")
# The bundled CPU runtime also stores these; `sglang serve` does not accept them.
RUNTIME_ONLY_KV_DTYPES = ("float16", "float32", "float64")

EXTRA_CHECKS: dict[str, str] = {
    "tp_dcp": "SGLang checks tp % dcp only when it builds the process groups "
              "(distributed/parallel_state.py initialize_model_parallel)",
    "dcp_containment": "SGLang checks tp % dcp, not that a DCP group stays inside one attention-DP replica",
    "tp_ep": "SGLang derives moe_tp_size = tp // ep when it builds the MoE groups "
             "(distributed/parallel_state.py initialize_model_parallel)",
    "heads": "attention heads that do not split over attn_tp fail at weight loading",
    "pp_layers": "more pipeline stages than layers fail when the layers are partitioned",
    "nodes": "GPUs that do not divide over the nodes",
    "node_fit": "SGLang cannot count the GPUs of the other nodes",
    "weights_fit": "weights per rank larger than mem_fraction_static * memory fail at load",
    "fi_a2a_hardware": "SGLang's resolution checks only CUDA for fi_a2a; its own message says FlashInfer's "
                       "MNNVL all-to-all needs Blackwell (arg_groups/parallel_hook.py "
                       "handle_decode_context_parallelism)",
    "fi_a2a_fabric": "the MNNVL all-to-all needs the DCP group inside one NVLink domain; SGLang meets it at "
                     "NCCL init",
    "flashmla_fp8_dcp": "FlashMLA asserts dcp == 1 with fp8 KV when it runs "
                        "(layers/attention/flashmla_backend.py forward_decode)",
    "trtllm_dcp_spec": "trtllm_mla's _run_decode_kernel has no DCP target-verify path (TypeError at the "
                       "first verify; arg_groups/model_overrides/kimi_k3.py notes it)",
    "pd_dcp_sizes": "a PD pair needs both sides' DCP sizes; one `sglang serve` sees one side",
    "pd_page_size": "a PD pair needs both sides' page sizes; one `sglang serve` sees one side",
    "pd_kv_dtype": "a PD pair needs both sides' KV dtypes; one `sglang serve` sees one side",
}
