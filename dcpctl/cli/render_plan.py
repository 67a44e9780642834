"""Human-readable plan: verdict, violations, groups, rank map, decisions, memory."""
from __future__ import annotations

import shlex
from typing import Any

from dcpctl import console
from dcpctl.cli.render_hardware import render_hardware
from dcpctl.plan.groups import collapse, rank_info
from dcpctl.plan.planner import Plan
from dcpctl.plan.engines import target

GIB = 2**30
MAX_GROUPS_SHOWN = 8


def _bytes(n: float) -> str:
    for unit, size in (("GiB", GIB), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:,.0f} B"


def _header(p: Plan) -> None:
    r, t = p.request, p.request.topology
    verdict = "[bold green]VALID[/]" if p.valid else "[bold red]INVALID[/]"
    console.out.print(f"{verdict}  {r.model.name} on {r.hardware.name} ({r.hardware.gpu_name}): "
                      f"tp {t.tp_size}, dp {t.dp_size}{' (attention DP)' if t.enable_dp_attention else ''}, "
                      f"dcp {t.dcp_size}, ep {t.ep_size}, pp {t.pp_size}, {t.total_gpus} GPU(s) on "
                      f"{t.nnodes} node(s); attn_tp {t.attn_tp}; {_rules(p)} rules", soft_wrap=True)
    spelled = target(r.engine).spelling(r)  # the same deployment in the engine's own flags (docs/vllm.md: topology)
    if spelled:
        console.out.print(f"  {spelled}", soft_wrap=True)
    for v in p.violations:
        console.out.print(f"  [red]x[/] [bold]{v.code}[/]: {v.message}", soft_wrap=True)
    for w in p.all_warnings:
        console.out.print(f"  [yellow]![/] {w}", soft_wrap=True)


def _groups(p: Plan) -> None:
    rows = []
    for kind, gs in p.groups.items():
        shown = "  ".join(f"[{collapse(g)}]" for g in gs[:MAX_GROUPS_SHOWN])
        more = f"  ... {len(gs) - MAX_GROUPS_SHOWN} more" if len(gs) > MAX_GROUPS_SHOWN else ""
        rows.append([kind, len(gs[0]) if gs else 0, len(gs), shown + more])
    console.out.print(console.table("Groups", ["kind", "size", "count", "ranks"], rows))


def _rank_map(p: Plan, show_all: bool) -> None:
    t = p.request.topology
    n = t.total_gpus if show_all else min(t.total_gpus, 16)
    cols = ["rank", "node", "tp_rank", "attn_dp", "attn_tp_rank", "dcp_rank", "ep_rank"]
    rows = []
    for i in range(n):
        ri = rank_info(t, i)
        rows.append([i, ri.node, ri.tp_rank, ri.attn_dp_rank, ri.attn_tp_rank, ri.dcp_rank, ri.ep_rank])
    title = "Rank map" + ("" if n == t.total_gpus else f" (first {n} of {t.total_gpus}; --rank-map for all)")
    console.out.print(console.table(title, cols, rows))


def _decisions(p: Plan) -> None:
    rows = [[k, d.value, d.reason] for k, d in p.decisions.items()]
    console.out.print(console.table("Decisions", ["setting", "value", "reason"], rows))


def _memory(p: Plan) -> None:
    m: dict[str, Any] = p.memory
    rows = [
        ["KV per token (all MLA layers)", _bytes(m["kv_bytes_per_token"]) + f" ({m['kv_cache_dtype']})"],
        ["KV per token per rank", _bytes(m["kv_bytes_per_token_per_rank"])],
        ["weights per rank", _bytes(m["weight_bytes_per_rank"])],
        ["weight format", m["weight_format"]],
        ["replicated-Q overhead per rank", _bytes(m["replicated_q_bytes_per_rank"])],
        ["KV budget per rank", _bytes(m["kv_budget_bytes_per_rank"])],
        [f"MHA prefill transient ({m['mha_prefill_chunk_tokens']:,}-token chunk)",
         _bytes(m["mha_prefill_transient_bytes_per_rank"])],
        ["KV rows per rank / virtual tokens", f"{m['kv_rows_per_rank']:,} / {m['kv_virtual_tokens']:,}"],
        ["longest context", f"{m['max_context_len']:,} (limited by {m['max_context_limited_by']})"],
        ["capacity gain vs dcp 1", f"{m['capacity_gain_vs_dcp1']}x (nominal {m['nominal_gain']}x)"],
    ]
    if m.get("draft_kv_bytes_per_token_per_rank"):
        rows.append(["draft KV per token per rank (replicated)", _bytes(m["draft_kv_bytes_per_token_per_rank"])])
    if "kda_max_requests" in m:
        rows.append(["KDA state per request per rank", _bytes(m["kda_state_bytes_per_request_per_rank"])])
        rows.append(["KDA concurrency ceiling (unchanged by DCP)", f"{m['kda_max_requests']:,}"])
    if "max_concurrency" in m:
        rows.append([f"concurrent requests at {m['context_len']:,} tokens",
                     f"{m['max_concurrency']:,} (dcp 1: {m['max_concurrency_dcp1']:,}; "
                     f"limited by {m['concurrency_limited_by']})"])
    console.out.print(console.table("Memory (per rank)", ["", "value"], rows))


def _compositions(p: Plan) -> None:
    if p.compositions:
        rows = [[k, "; ".join(f"{a}: {b}" for a, b in v.items() if b is not None)] for k, v in p.compositions.items()]
        console.out.print(console.table("Compositions", ["", ""], rows))


def _estimate(p: Plan) -> None:
    e = p.estimate
    if not e:
        return
    if "unavailable" in e:
        console.out.print(f"No estimate at {e['concurrency']} concurrent requests: {e['unavailable']}", soft_wrap=True)
        return
    same = e["plan"]["choice"] == e["dcp1"]["choice"]   # a dcp 1 plan is its own baseline: one row
    rows = [[e[k]["choice"], f"{e[k]['step_attention_ms']:.3f}", "yes" if e[k]["fits"] else "no"]
            for k in (("plan",) if same else ("plan", "dcp1"))]
    vs = "the plan is dcp 1" if same else f"speedup vs dcp 1: {e['speedup_vs_dcp1']:.2f}x"
    console.out.print(console.table(f"Estimate at {e['concurrency']} concurrent requests ({e['constants']}); {vs}",
                                    ["choice", "attention ms/step", "fits"], rows))


def render_table(p: Plan, show_all_ranks: bool = False) -> None:
    _header(p)
    render_hardware(p.request.hardware)
    if p.groups:
        _groups(p)
        _rank_map(p, show_all_ranks)
    _decisions(p)
    if p.memory:
        _memory(p)
    _compositions(p)
    _estimate(p)
    _passed_through(p)
    _skipped(p)


def _passed_through(p: Plan) -> None:
    if p.request.engine_args:
        flags = " ".join(shlex.join(g) for g in p.request.engine_args)
        console.out.print(f"[bold]Passed through unchanged[/] (not modelled; `export sglang` carries them): {flags}",
                          soft_wrap=True)


def _skipped(p: Plan) -> None:
    if p.topology_only:
        console.out.print("[bold]Topology-only verdict[/] (no --model-path, --model-preset or --preset); "
                          "model checks skipped:", soft_wrap=True)
        for s in p.skipped_checks:
            console.out.print(f"  - {s}", soft_wrap=True)


def _rules(p: Plan) -> str:
    return target(p.request.engine).release
