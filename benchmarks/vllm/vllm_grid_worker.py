#!/usr/bin/env python3
"""vLLM side of benchmarks/vllm/vllm_grid.py: resolve many `vllm serve` argv lists in one process per hardware
profile.

Runs in the vLLM 0.34.0 venv (benchmarks/vllm/setup_venv.sh), never in dcpctl's.
`vllm_grid_worker.py HARDWARE` reads one JSON argv list per stdin line, writes one JSON result per line.
Per argv, vLLM's own code, in the order a server runs it:
  1. `vllm serve`'s parser (entrypoints/common/cli_args.py make_arg_parser) and
     `AsyncEngineArgs.from_cli_args(...).create_engine_config()` (ParallelConfig, ModelConfig against the local
     config.json, CacheConfig, VllmConfig with the model's verify_and_update_config);
  2. the worker's attention selection: `v1/attention/selector.py get_attn_backend` for the MLA layer (head size
     kv_lora_rank + qk_rope_head_dim) under the config, on the faked platform (benchmarks/vllm/vllm_cpu.py);
  3. the block size: `Platform._preferred_block_size_for_backends` unless --block-size was given, then
     `VllmConfig.validate_block_size` (the engine core's DCP interleave check);
  4. the model runner's PCP rules (v1/worker/gpu/pcp_manager.py `PCPManager.validate_config`, which
     `maybe_build_pcp_manager` runs when the model runner starts).
The memory share is `CacheConfig.resolved_gpu_memory_utilization` (1.0 with the extensible KV cache).
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
import time
import traceback
import warnings

import vllm_cpu  # beside this file: run by path in the vLLM venv, its folder is first on sys.path


def resolve(argv: list[str], platform: type) -> dict:
    from vllm.config import set_current_vllm_config
    from vllm.config.cache import CacheConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    from vllm.v1.attention.selector import get_attn_backend
    err, at = io.StringIO(), "config"
    try:
        with contextlib.redirect_stderr(err):
            args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
            cfg = AsyncEngineArgs.from_cli_args(args).create_engine_config()
        pc, cc, mc = cfg.parallel_config, cfg.cache_config, cfg.model_config
        text = mc.hf_text_config
        at = "worker: attention selector"
        vllm_cpu.allow_flashinfer()
        with set_current_vllm_config(cfg), vllm_cpu.cuda_tensors_on_meta():
            backend = get_attn_backend(text.kv_lora_rank + text.qk_rope_head_dim, mc.dtype, cc.cache_dtype,
                                       use_mla=True, num_heads=mc.get_num_attention_heads(pc))
            if not cc.user_specified_block_size:
                cc.block_size = platform._preferred_block_size_for_backends([backend], CacheConfig.DEFAULT_BLOCK_SIZE,
                                                                            cfg)
        at = "engine core: validate_block_size"
        cfg.validate_block_size()
        at = "worker: model runner PCP check"
        from vllm.v1.worker.gpu.pcp_manager import PCPManager
        PCPManager.validate_config(cfg, supports_mm_inputs=mc.is_multimodal_model)
        return {"accepted": True, "resolved": {
            "tp": pc.tensor_parallel_size, "dp": pc.data_parallel_size, "pp": pc.pipeline_parallel_size,
            "dcp": pc.decode_context_parallel_size, "pcp": pc.prefill_context_parallel_size,
            "ep": pc.enable_expert_parallel, "nnodes": pc.nnodes, "dcp_comm_backend": pc.dcp_comm_backend,
            "dcp_q_replicate": pc.dcp_q_replicate, "cp_kv_cache_interleave_size": pc.cp_kv_cache_interleave_size,
            "kv_cache_dtype": cc.cache_dtype, "model_dtype": str(mc.dtype).removeprefix("torch."),
            "block_size": cc.block_size, "attention_backend": backend.get_name(),
            "gpu_memory_utilization": cc.resolved_gpu_memory_utilization, "max_model_len": mc.max_model_len}}
    except SystemExit as e:  # argparse prints its error to stderr, then exits 2
        lines = [x for x in err.getvalue().splitlines() if "error:" in x]
        return {"accepted": False, "error": f"argparse exit {e.code}: " + (lines[-1] if lines else ""),
                "at": at}
    except BaseException as e:  # noqa: BLE001 - every rejection is a result
        return {"accepted": False, "error": f"{type(e).__name__}: {str(e)[:600]}", "at": f"{at}: {_where(e)}"}


def _where(e: BaseException) -> str:
    """The vLLM source line that raised (for docs/vllm.md citations), relative to site-packages."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "/vllm/" in f.filename] or \
        traceback.extract_tb(e.__traceback__)
    f = frames[-1]
    return f"{f.filename.split('site-packages/')[-1]}:{f.lineno} ({f.name})"


def main() -> None:
    warnings.filterwarnings("ignore")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    logging.disable(logging.WARNING)
    platform = vllm_cpu.install(sys.argv[1])
    for line in sys.stdin:
        if not line.strip():
            continue
        t0 = time.time()
        out = resolve(json.loads(line), platform)
        out["seconds"] = round(time.time() - t0, 3)
        sys.stdout.write(json.dumps(out, default=str) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
