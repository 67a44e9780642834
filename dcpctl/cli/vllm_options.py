"""The plan flags `--engine vllm` adds: vLLM's own names and single-dash aliases (dcpctl.plan.vllm_args maps them)."""
from __future__ import annotations

from typing import Any, Callable

import click

from dcpctl.plan import vllm
from dcpctl.plan.vllm_args import ALIASES

F = Callable[..., Any]


OPTIONS: list[Callable[[F], F]] = [
    click.option("--enable-expert-parallel/--disable-expert-parallel", "-ep", "enable_expert_parallel", default=None,
                 help="vLLM: experts over all tp * dp ranks (with --dp-size > 1: attention DP)."),
    click.option("--prefill-context-parallel-size", "-pcp", "prefill_context_parallel_size", type=int,
                 help="vLLM: prefill context parallel size (checked; its rank layout is not planned)."),
    click.option("--dcp-q-replicate/--no-dcp-q-replicate", "dcp_q_replicate", default=None,
                 help="vLLM's name of --dcp-replicate-q-proj."),
    click.option("--cp-kv-cache-interleave-size", "cp_kv_cache_interleave_size", type=int,
                 help="vLLM: tokens per DCP rank before the next (default 1: token i on rank i % dcp)."),
    click.option("--block-size", "block_size", type=int, help="vLLM's name of --page-size (tokens per KV block)."),
    click.option("--max-model-len", "max_model_len", type=int, help="vLLM's name of --context-len."),
    click.option("--gpu-memory-utilization", "gpu_memory_utilization", type=float,
                 help=f"vLLM's name of --mem-fraction-static (vLLM default {vllm.EXTENSIBLE_GPU_MEMORY_UTILIZATION} "
                      f"with its extensible KV cache, else {vllm.DEFAULT_GPU_MEMORY_UTILIZATION})."),
    click.option("--max-num-seqs", "max_num_seqs", type=int, help="vLLM's name of --max-running-requests."),
    *[click.option(flag, key, type=int, hidden=True) for key, (flag, _) in ALIASES.items()],  # -tp 8 = --tp-size 8
]
