"""Exports for real deployments: pure functions of a plan (snapshot-tested).

    sglang    `sglang serve` for every node (+ the PD pair and router when disaggregation is planned)
    torchrun  per-node torchrun commands for the bundled runtime (c10d rendezvous)
    slurm     an sbatch script, one task per node, node rank from SLURM_NODEID
    k8s       a LeaderWorkerSet manifest (leader = node 0, workers = the rest)
"""
from __future__ import annotations

import json
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import yaml

from dcpctl.launch.export_common import ExportOptions, env_prefix, hardware_env
from dcpctl.launch.targets import carried, typed_dests
from dcpctl.plan.engines import TARGETS, target
from dcpctl.plan.errors import UserError
from dcpctl.plan.model_registry import remote_code
from dcpctl.refs import load_ref
from dcpctl.plan.planner import Plan
from dcpctl.plan.sglang import RUNTIME_ONLY_KV_DTYPES
from dcpctl.plan.sglang_args import sglang_table

FORMATS = (*TARGETS, "torchrun", "slurm", "k8s")
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")  # SGLang's is_eagle() or is_standalone()


def sglang_args(plan: Plan, opts: ExportOptions, node_rank: int | None = 0) -> list[str]:
    """`sglang serve` argv for one node (node_rank None: leave it to the caller's template)."""
    r, t, d = plan.request, plan.request.topology, plan.decisions
    a = ["sglang", "serve", "--model-path", opts.model_path, "--tp-size", str(t.tp_size)]
    if t.enable_dp_attention and t.dp_size > 1:
        a += ["--attn-dp-size", str(t.dp_size)]
    elif t.dp_size > 1:
        a += ["--dp-size", str(t.dp_size)]
    if t.dcp_size > 1:
        a += ["--dcp-size", str(t.dcp_size), "--dcp-comm-backend", d["dcp_comm_backend"].value]
        a += ["--dcp-replicate-q-proj" if d["dcp_replicate_q_proj"].value else "--no-dcp-replicate-q-proj"]
    a += _if(t.ep_size > 1, "--ep-size", t.ep_size) + _if(t.pp_size > 1, "--pp-size", t.pp_size)
    if t.nnodes > 1:
        a += ["--nnodes", str(t.nnodes), "--node-rank", "NODE_RANK" if node_rank is None else str(node_rank),
              "--dist-init-addr", opts.dist_init_addr]
    a += _if(r.page_size != 1, "--page-size", r.page_size)
    a += _if(r.kv_cache_dtype != "auto", "--kv-cache-dtype", _sgl_kv_dtype(r.kv_cache_dtype))
    a += _if(r.attention_backend != "auto", "--decode-attention-backend", r.attention_backend)
    a += ["--mem-fraction-static", str(r.mem_fraction_static)]
    a += _if(bool(r.context_len), "--context-length", r.context_len)
    a += _if(bool(r.max_running_requests), "--max-running-requests", r.max_running_requests)
    a += _spec_args(plan) + _cache_args(plan)
    if remote_code(r.model.model_type, r.model.architectures):  # the model registry's families
        a.append("--trust-remote-code")
    table = sglang_table()
    a += (([] if "host" in typed_dests(table, r.engine_args) else ["--host", "0.0.0.0"])
          + ["--port", str(opts.port)])
    return a + carried(table, a, r.engine_args)  # the pasted line's other flags, as typed


def _if(cond: bool, flag: str, value: Any) -> list[str]:
    return [flag, str(value)] if cond else []


def _sgl_kv_dtype(v: str) -> str:
    return {"fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}.get(v, v)


def _spec_args(plan: Plan) -> list[str]:
    """SGLang 0.5.23's EAGLE family (EAGLE, EAGLE3, NEXTN, STANDALONE) takes steps, top-k and draft tokens
    together or none of them (arg_groups/speculative_hook.py `_handle_eagle_family`); the plan has resolved
    them already (plan/speculative.py: given, or SGLang's own 3 / 1 / 4), so the export writes what the plan
    holds."""
    r = plan.request
    if not r.speculative_algorithm:
        return []
    a = ["--speculative-algorithm", r.speculative_algorithm]
    if r.speculative_algorithm in EAGLE_FAMILY and r.speculative_num_steps is not None:
        a += ["--speculative-num-steps", str(r.speculative_num_steps),
              "--speculative-eagle-topk", str(r.speculative_eagle_topk)]
    a += _if(r.speculative_num_draft_tokens is not None, "--speculative-num-draft-tokens",
             r.speculative_num_draft_tokens)
    draft = r.draft_model.extra.get("path") if r.draft_model else None
    return a + _if(bool(draft), "--speculative-draft-model-path", draft)


def _cache_args(plan: Plan) -> list[str]:
    r = plan.request
    a: list[str] = []
    if r.enable_hierarchical_cache:
        a.append("--enable-hierarchical-cache")
        a += _if(bool(r.hicache_storage_backend), "--hicache-storage-backend", r.hicache_storage_backend)
    if r.disaggregation_mode != "null":
        a += ["--disaggregation-mode", r.disaggregation_mode,
              "--disaggregation-transfer-backend", r.disaggregation_transfer_backend]
    return a


def export_sglang(plan: Plan, opts: ExportOptions) -> dict[str, str]:
    """One script per node; with PD disaggregation, the peer side's nodes and the router too."""
    target(plan.request.engine).check_export(plan.request, "sglang")
    files = _sglang_nodes(plan, opts, plan.request.disaggregation_mode)
    if plan.request.disaggregation_mode != "null":
        files.update(_pd_peer(plan, opts))
    return files


def _sglang_nodes(plan: Plan, opts: ExportOptions, role: str) -> dict[str, str]:
    prefix = "" if role == "null" else f"{role}-"
    env = env_prefix(hardware_env(plan))
    return {f"{prefix}node-{i}.sh": f"#!/usr/bin/env bash\n# {role if role != 'null' else 'serving'} node "
            f"{i} of {plan.request.topology.nnodes}\n{env}{shlex.join(sglang_args(plan, opts, i))}\n"
            for i in range(plan.request.topology.nnodes)}


def _pd_peer(plan: Plan, opts: ExportOptions) -> dict[str, str]:
    from dcpctl.launch.pd import peer_plan
    r = plan.request
    peer = peer_plan(plan)
    peer_mode = peer.request.disaggregation_mode
    peer_opts = replace(opts, port=opts.port + 1, dist_init_addr=_bump_port(opts.dist_init_addr))
    files = _sglang_nodes(peer, peer_opts, peer_mode)
    pre, dec = (opts, peer_opts) if r.disaggregation_mode == "prefill" else (peer_opts, opts)
    router = ["python", "-m", "sglang_router.launch_router", "--pd-disaggregation",
              "--prefill", f"http://PREFILL_NODE0_ADDR:{pre.port}", "--decode",
              f"http://DECODE_NODE0_ADDR:{dec.port}", "--host", "0.0.0.0", "--port", "8000"]
    files["router.sh"] = ("#!/usr/bin/env bash\n# PD router: clients talk to port "
                          f"8000\n{shlex.join(router)}\n")
    return files


def _bump_port(addr: str) -> str:
    host, _, port = addr.rpartition(":")
    return f"{host}:{int(port) + 1}" if port.isdigit() else addr


TORCHRUN_MAX_TOTAL_TOKENS = 16384  # CPU: `dcpctl launch`'s default; CUDA takes the plan's whole KV capacity
HERE = 'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"'


def export_torchrun(plan: Plan, opts: ExportOptions) -> dict[str, str]:
    """node-N.sh plus the launch.yaml and serve.json every rank reads ($DCPCTL_LAUNCH_CONFIG, $DCPCTL_SERVE),
    next to the script; one node uses torchrun's standalone rendezvous, several use c10d at
    --dist-init-addr."""
    from dcpctl.contract.launch_config import DEFAULT_CHUNKED_PREFILL
    from dcpctl.launch.config import render_launch_config
    from dcpctl.launch.torchrun import SAFE_ENV
    t, cuda = plan.request.topology, plan.request.hardware.device == "cuda"
    if plan.request.disaggregation_mode != "null":
        raise UserError("the bundled runtime serves PD disaggregation only in batch mode (`dcpctl "
                        "generate`): export it with `dcpctl export sglang`")
    tokens = ((plan.memory.get("kv_virtual_tokens") or TORCHRUN_MAX_TOTAL_TOKENS)
              if cuda else TORCHRUN_MAX_TOTAL_TOKENS)
    # the bundled runtime stores KV in its compute dtype: a CPU plan's float KV dtype is the dtype it runs
    kv = plan.request.kv_cache_dtype
    dtype = "bfloat16" if cuda else kv if kv in RUNTIME_ONLY_KV_DTYPES else "float32"
    cfg = render_launch_config(plan, opts.model_path, dtype, "cuda" if cuda else "cpu",
                               tokens, DEFAULT_CHUNKED_PREFILL).for_serving().to_dict()
    if not Path(opts.model_path).exists():
        cfg["model"]["path"] = opts.model_path  # a path on the serving nodes, not on this machine
    serve = {"host": "127.0.0.1", "port": opts.port}
    files = {opts.launch_config: yaml.safe_dump(cfg, sort_keys=False, default_flow_style=None),
             "serve.json": json.dumps({k: v for k, v in serve.items() if v is not None}, indent=1) + "\n"}
    env = (f'DCPCTL_LAUNCH_CONFIG="$HERE/{opts.launch_config}" DCPCTL_SERVE="$HERE/serve.json" '
           + env_prefix({**SAFE_ENV, **hardware_env(plan)}))
    for i in range(t.nnodes):
        rdzv = ["--standalone"] if t.nnodes == 1 else [
            f"--node-rank={i}", "--rdzv-backend=c10d", f"--rdzv-endpoint={opts.dist_init_addr}",
            "--rdzv-id=dcpctl"]
        argv = ["torchrun", f"--nnodes={t.nnodes}", f"--nproc-per-node={t.ranks_per_node}", *rdzv,
                "--max-restarts=0", "-m", "dcpctl.runtime.worker"]
        files[f"node-{i}.sh"] = (f"#!/usr/bin/env bash\n# bundled runtime, node {i} of {t.nnodes}: serves "
                                 f"http://127.0.0.1:{opts.port} on node 0 (host, port: serve.json)\n"
                                 f"set -euo pipefail\n{HERE}\n{env}{shlex.join(argv)}\n")
    return files


def export_slurm(plan: Plan, opts: ExportOptions) -> dict[str, str]:
    target(plan.request.engine).check_export(plan.request, "slurm")
    t = plan.request.topology
    port = opts.dist_init_addr.rpartition(":")[2] or "5000"
    args = serve_args(plan, replace(opts, dist_init_addr=f"HEAD_ADDR:{port}"), node_rank=None)
    cmd = shlex.join(args).replace("NODE_RANK", '"$SLURM_NODEID"').replace("HEAD_ADDR:", '"$HEAD":')
    cmd = cmd.replace("--master-addr HEAD_ADDR", '--master-addr "$HEAD"').replace(  # vllm serve's spelling
        " NODE_HEADLESS", ' $([ "$SLURM_NODEID" -gt 0 ] && echo --headless)')
    quoted = "'" + cmd.replace("'", "'\\''") + "'"
    env = "".join(f"export {k}={v}\n" for k, v in hardware_env(plan).items())
    lines = [
        "#!/usr/bin/env bash",
        f"#SBATCH --job-name=dcpctl-{plan.request.engine}",
        f"#SBATCH --nodes={t.nnodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={t.ranks_per_node}",
        "#SBATCH --exclusive",
        "set -euo pipefail",
        'HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "export HEAD",
        f"{env}srun --ntasks-per-node=1 bash -c {quoted}",
    ]
    return {"dcpctl.sbatch": "\n".join(lines) + "\n"}


def export_k8s(plan: Plan, opts: ExportOptions) -> dict[str, str]:
    target(plan.request.engine).check_export(plan.request, "k8s")
    t = plan.request.topology
    port = opts.dist_init_addr.rpartition(":")[2] or "5000"

    def template(rank_expr: str) -> dict[str, Any]:
        args = serve_args(plan, replace(opts, dist_init_addr=f"$(LWS_LEADER_ADDRESS):{port}"), node_rank=None)
        argv = [x.replace("NODE_RANK", rank_expr) for x in args if x != "NODE_HEADLESS" or rank_expr != "0"]
        argv = [x.replace("NODE_HEADLESS", "--headless") for x in argv]  # vllm serve: workers run headless
        env = [{"name": k, "value": v} for k, v in hardware_env(plan).items()]
        container = {"name": plan.request.engine, "image": opts.image, "command": argv[:2], "args": argv[2:],
                     "resources": {"limits": {"nvidia.com/gpu": t.ranks_per_node}},
                     "ports": [{"containerPort": opts.port}],
                     "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}
        if env:
            container["env"] = env
        # NCCL and torch's shared-memory transports need more than a container's default 64 MiB /dev/shm
        return {"spec": {"containers": [container],
                         "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]}}

    manifest = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                "metadata": {"name": f"dcpctl-{plan.request.engine}"},
                "spec": {"replicas": 1, "leaderWorkerTemplate": {
                    "size": t.nnodes, "restartPolicy": "RecreateGroupOnPodRestart",
                    "leaderTemplate": template("0"), "workerTemplate": template("$(LWS_WORKER_INDEX)")}}}
    return {"lws.yaml": yaml.safe_dump(manifest, sort_keys=False, width=200)}


def serve_args(plan: Plan, opts: ExportOptions, node_rank: int | None = 0) -> list[str]:
    """The plan's engine's serve argv for one node (its target's `serve_args`: `sglang serve`,
    `vllm serve`)."""
    return load_ref(target(plan.request.engine).serve_args)(plan, opts, node_rank)


def _engine_check(fmt: str, exporter: Callable[[Plan, ExportOptions], dict[str, str]]):
    """An engine's own format exports plans made under its rules; torchrun those the bundled runtime runs;
    slurm/k8s wrap any engine's serve command."""
    def run(plan: Plan, opts: ExportOptions) -> dict[str, str]:
        engine = target(plan.request.engine)
        if (fmt in TARGETS and fmt != engine.name) or (fmt == "torchrun" and not engine.bundled_runtime):
            own = TARGETS.get(fmt, target(None))
            raise UserError(f"`export {fmt}` needs a plan under {own.label}'s rules (--engine {own.name}); "
                            f"this plan is --engine {engine.name}: use `dcpctl export {engine.name}` (or "
                            f"slurm/k8s, which wrap `{' '.join(engine.command)}`)")
        return exporter(plan, opts)
    return run


def _engine_export(name: str) -> Callable[[Plan, ExportOptions], dict[str, str]]:
    return lambda plan, opts: load_ref(TARGETS[name].exporter)(plan, opts)


EXPORTERS: dict[str, Callable[[Plan, ExportOptions], dict[str, str]]] = {
    f: _engine_check(f, e) for f, e in {**{name: _engine_export(name) for name in TARGETS},
                                        "torchrun": export_torchrun, "slurm": export_slurm,
                                        "k8s": export_k8s}.items()}
