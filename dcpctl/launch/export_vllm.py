"""`dcpctl export vllm`: `vllm serve` per node from a plan made under `--engine vllm` (a pure function, snapshot-tested).

Every setting the plan resolved is written out, so vLLM runs what the plan says: the DCP exchange,
Q replication, interleave size, attention backend and block size, not only what the user typed; every
`vllm serve` flag the plan passed through follows as typed (a speculative config, --dtype, ...). The memory
share is written only when typed: unset, vLLM resolves it as the plan did (1.0 with its extensible KV cache).
Several nodes use vLLM's multiprocessing launch (`--nnodes --node-rank --master-addr --master-port`;
every node but node 0 runs `--headless`: engine/arg_utils.py create_engine_config).
"""
from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from dcpctl.launch.export_common import env_prefix, hardware_env
from dcpctl.plan import vllm_settings
from dcpctl.plan.engines import target
from dcpctl.plan.errors import UserError
from dcpctl.plan.model_registry import remote_code
from dcpctl.plan.vllm import VLLM_VERSION
from dcpctl.plan.vllm_args import PER_NODE

if TYPE_CHECKING:
    from dcpctl.launch.export_common import ExportOptions
    from dcpctl.plan.planner import Plan


HEADLESS = "NODE_HEADLESS"  # in a template: `--headless` on every node but node 0


def vllm_args(plan: "Plan", opts: "ExportOptions", node_rank: int | None = 0) -> list[str]:
    """`vllm serve` argv for one node (node_rank None: NODE_RANK, for a template that fills it in)."""
    r, t, d = plan.request, plan.request.topology, plan.decisions
    if r.engine != "vllm":
        raise UserError("`dcpctl export vllm` exports a plan made with --engine vllm; add --engine vllm")
    typed = vllm_settings.read(r.engine_args)
    dp = t.attn_dp if t.enable_dp_attention else t.dp_size
    a = ["vllm", "serve", opts.model_path, "--tensor-parallel-size", str(t.attn_tp)]
    a += _if(dp > 1, "--data-parallel-size", dp) + _if(t.pp_size > 1, "--pipeline-parallel-size", t.pp_size)
    a += ["--enable-expert-parallel"] if t.ep_size > 1 else []
    if t.dcp_size > 1:
        a += ["--decode-context-parallel-size", str(t.dcp_size), "--dcp-comm-backend", d["dcp_comm_backend"].value,
              "--dcp-q-replicate" if d["dcp_replicate_q_proj"].value else "--no-dcp-q-replicate",
              "--cp-kv-cache-interleave-size", str(d["cp_kv_cache_interleave_size"].value)]
    if vllm_settings.config_backend(typed, None) is None:  # else --attention-config carries it (the two exclude)
        a += ["--attention-backend", d["decode_attention_backend"].value]
    a += ["--block-size", str(d["page_size"].value)]
    a += _if(r.kv_cache_dtype != "auto", "--kv-cache-dtype", r.kv_cache_dtype)
    default = vllm_settings.memory_default(typed)[0]
    a += _if(r.mem_fraction_static != default, "--gpu-memory-utilization", r.mem_fraction_static)
    a += _if(bool(r.context_len), "--max-model-len", r.context_len)
    a += _if(bool(r.max_running_requests), "--max-num-seqs", r.max_running_requests)
    if remote_code(r.model.model_type, r.model.architectures):  # the model registry's families
        a.append("--trust-remote-code")
    if t.nnodes > 1:
        host, _, port = opts.dist_init_addr.rpartition(":")
        a += ["--nnodes", str(t.nnodes), "--node-rank", "NODE_RANK" if node_rank is None else str(node_rank),
              "--master-addr", host or opts.dist_init_addr, "--master-port", port or "5000"]
        if node_rank != 0:  # only node 0 serves HTTP; a template (slurm, k8s) decides per node
            a.append("--headless" if node_rank is not None else HEADLESS)
    a += _if("host" not in typed, "--host", "0.0.0.0") + _if("port" not in typed, "--port", opts.port)
    return a + _carried(a, r.engine_args)


def _carried(written: list[str], typed: tuple[tuple[str, ...], ...]) -> list[str]:
    """The passed-through flags as typed, but those of a setting written above or one a launcher sets per node."""
    engine = target("vllm")
    have = {engine.dest(tok) for tok in written if tok.startswith("-")}
    launcher = set(PER_NODE) - {"host", "port"}  # the export's own multi-node flags
    return [tok for g in typed if engine.dest(g[0]) not in have | launcher for tok in g]


def _if(cond: bool, flag: str, value: object) -> list[str]:
    return [flag, str(value)] if cond else []


def export_vllm(plan: "Plan", opts: "ExportOptions") -> dict[str, str]:
    """One script per node."""
    env = env_prefix(hardware_env(plan))
    n = plan.request.topology.nnodes
    return {f"node-{i}.sh": f"#!/usr/bin/env bash\n# vLLM {VLLM_VERSION} serving node {i} of {n}"
            f"{'' if i == 0 else ' (headless)'}\n{env}{shlex.join(vllm_args(plan, opts, i))}\n" for i in range(n)}
