"""`bench rank`'s output: the measured file (`kind: dcpctl.bench.rank`, version 1) and its tables.

The file is what `dcpctl plan --measured FILE` reads (the reader refuses another kind or version).  Required
keys: kind, version, command, commit, created, device, plan, weights, memory, host_gap_us, cells; every figure
in it was measured by this run except `plan_bytes*` and `plan_budget_bytes` (the plan's), the `*_full` figures
(scaled from the layers run to the model's, where --layers ran fewer) and, off CUDA, memory (computed) and the
host gap (not measured: 0, with `host_gap_measured` false).
"""
from __future__ import annotations

import datetime
import functools
from typing import Any

from dcpctl import console, tuning

KIND, VERSION = "dcpctl.bench.rank", 1
_commit = functools.cache(tuning.source_commit)   # asked once: the document is rebuilt after every cell
SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64"}


def document(run: Any, measured: dict[str, Any], weights: dict[str, Any], device: dict[str, Any],
             command: str, attention_backend: str) -> dict[str, Any]:
    served = measured["served"] or {}
    return {"kind": KIND, "version": VERSION, "command": command, "commit": _commit(),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": device, "plan": plan_section(run, attention_backend), "weights": weights,
            "memory": memory_section(run, served, weights),
            "host_gap_us": round(served.get("host_gap_us", 0.0), 2),
            "host_gap_measured": "host_gap_us" in served, "served": served or None,
            "base_us": measured["base_us"], "cells": measured["cells"], "skipped": measured["skipped"]}


def plan_section(run: Any, attention_backend: str) -> dict[str, Any]:
    req, launch = run.plan.request, run.launch
    t, d, m = launch.topology, launch.decisions, req.model
    fp8 = run.plan.memory.get("weight_format", "").startswith("FP8")
    return {"model": m.name, "architectures": list(m.architectures),
            "weights_dtype": "fp8" if fp8 else SHORT.get(m.dtype, m.dtype),
            "tp_size": t.tp_size, "dcp_size": t.dcp_size, "ep_size": t.ep_size,
            "attn_dp_size": t.attn_dp_size, "attn_tp_size": t.attn_tp_size,
            "kv_cache_dtype": run.plan.memory.get("kv_cache_dtype"), "kv_cache_dtype_run": launch.model.dtype,
            "dcp_comm_backend": d.dcp_comm_backend, "dcp_replicate_q_proj": d.dcp_replicate_q_proj,
            "hardware": req.hardware.name, "rank": run.rank, "rank_reason": run.rank_reason,
            "num_layers": run.num_layers, "layers_run": run.layers_run, "dense_layers_run": run.dense_run,
            "moe_layers_run": run.moe_run, "page_size": launch.kv.page_size,
            "attention_backend": attention_backend, "context_len": req.context_len}


def memory_section(run: Any, served: dict[str, Any], weights: dict[str, Any]) -> dict[str, Any]:
    """Peak bytes at the plan's max_concurrency and context against the plan's budget (mem_fraction_static of
    the rank's memory).  The served phase's KV pool holds its requests; where --layers ran fewer layers, or
    the phase ran fewer requests than max_concurrency (SERVED_MAX_BATCH), weights and KV are scaled to the
    plan's."""
    mem, req = run.plan.memory, run.plan.request
    per_rank = int(mem.get("memory_per_rank_bytes", 0))
    budget = int(per_rank * req.mem_fraction_static)
    n = mem.get("max_concurrency", 0)
    if "kv_pool_bytes" in served:
        kv_full = int(served["kv_pool_bytes"] * run.num_layers / run.layers_run * max(n, 1) / served["batch"])
    else:
        kv_full = int(mem.get("kv_bytes_per_token_per_rank", 0) * n * mem.get("context_len", 0))
    weights_full = weights["loaded_bytes_full"] or weights["plan_bytes_full"]
    static = weights_full + kv_full
    measured = "peak_bytes" in served
    peak = (served["peak_bytes"] - weights["loaded_bytes"] - served["kv_pool_bytes"] + static
            if measured else static)
    fits = peak <= per_rank if measured else static <= budget
    return {"max_concurrency": n, "context": mem.get("context_len", 0),
            "peak_bytes": int(peak), "plan_budget_bytes": budget, "fits": bool(fits),
            "peak_measured": measured, "static_bytes": static, "memory_per_rank_bytes": per_rank,
            "served_batch": served.get("batch"), "error": served.get("error")}


def weights_section(run: Any, model: Any) -> dict[str, Any]:
    """Bytes loaded (every storage the model holds) against the plan's, for the layers run and the whole
    model."""
    from dcpctl.bench.rank_setup import dense_layers
    from dcpctl.runtime.models.footprint import weight_bytes
    loaded = weight_bytes(model)
    sizes = [(model.cfg.is_moe_layer(i), weight_bytes(layer)) for i, layer in enumerate(model.layers)]
    per_kind = dict(reversed(sizes))                      # moe? -> one layer's bytes
    dense = dense_layers(run.plan.request.model, run.num_layers)
    counts = {False: dense, True: run.num_layers - dense}
    full = None if any(n and kind not in per_kind for kind, n in counts.items()) else \
        loaded - sum(n for _, n in sizes) + sum(per_kind.get(kind, 0) * n for kind, n in counts.items())
    return {"loaded_bytes": loaded, "plan_bytes": run.plan_bytes(run.spec_run()),
            "loaded_bytes_full": full, "plan_bytes_full": run.plan_bytes(run.plan.request.model)}


def print_tables(doc: dict[str, Any]) -> None:
    p, mem = doc["plan"], doc["memory"]
    scaled = p["layers_run"] < p["num_layers"]
    fit = "fits" if mem["fits"] else "does not fit" if mem["peak_measured"] else "computed, not measured"
    console.info(f"memory at {mem['max_concurrency']} requests x {mem['context']} positions: peak "
                 f"{mem['peak_bytes'] / 2**30:.1f} GiB of {mem['memory_per_rank_bytes'] / 2**30:.1f} GiB "
                 f"({fit}); the plan's static budget {mem['plan_budget_bytes'] / 2**30:.1f} GiB")
    if doc["host_gap_measured"]:
        s = doc["served"]
        twin = (f"; this bench's step there {s['bench_step_us'] / 1e3:.3f} ms (served / bench "
                f"{s['served_step_us'] / s['bench_step_us']:.3f})" if s.get("bench_step_us") else "")
        console.info(f"served step at {s['batch']} x {s['context']}: {s['served_step_us'] / 1e3:.3f} ms on "
                     f"the GPU, host gap {doc['host_gap_us']:.1f} us between replays{twin}")
    cols = ["batch", "context", "routing", "step ms", "stand-in us", "compute ms"]
    cols += [f"x{p['num_layers']}/{p['layers_run']} ms"] if scaled else []
    cols += ["spread", "expert rows"]
    rows = [[c["batch"], c["context"], c["routing"], f"{c['step_us'] / 1e3:.3f}", f"{c['standin_us']:.1f}",
             f"{c['compute_us'] / 1e3:.3f}", *([f"{c['compute_us_full'] / 1e3:.3f}"] if scaled else []),
             f"{c['spread']:.3f}", f"{c.get('expert_rows', '-')}"] for c in doc["cells"]]
    title = (f"rank {p['rank']} of {p['model']}: tp {p['tp_size']}, dcp {p['dcp_size']}, ep {p['ep_size']}, "
             f"attn_dp {p['attn_dp_size']}, {p['layers_run']} of {p['num_layers']} layers")
    console.out.print(console.table(title, cols, rows))
    for s in doc["skipped"]:
        console.warn(f"batch {s['batch']} x context {s['context']} skipped: {s['reason']}")
