"""What an export target accepts: options only the bundled runtime has are refused for `sglang serve` targets, and
the `sglang serve` flags a plan passed through are carried as typed (never twice)."""
from __future__ import annotations

from dcpctl.plan.engine_args import EngineTable
from dcpctl.plan.errors import UserError
from dcpctl.plan.planner import Plan
from dcpctl.plan.sglang_args import sglang_table


def check_sglang_target(plan: Plan, fmt: str) -> None:
    """`sglang serve` runs on GPUs over NCCL with SGLang's KV dtypes: a plan for the CPU (gloo) or with a KV dtype
    only the bundled runtime stores is refused in one sentence that says what to use instead. A plan under
    --engine vllm (slurm, k8s) was already held to vLLM's KV dtypes and CUDA profiles by its own rules."""
    r, table = plan.request, sglang_table()
    if r.engine != "sglang":
        return
    kv_choices = table.by_dest["kv_cache_dtype"].choices or ()
    if r.kv_cache_dtype not in kv_choices:
        raise UserError(f"export {fmt}: --kv-cache-dtype {r.kv_cache_dtype} exists only in the bundled runtime; "
                        f"{table.label} takes {', '.join(kv_choices)} (export torchrun runs it as planned)")
    if r.hardware.device != "cuda":
        raise UserError(f"export {fmt}: the plan is for {r.hardware.name} hardware (CPU, gloo), which only the bundled "
                        "runtime runs; plan for a GPU profile (--hardware h200-8, b200-8, ...) or export torchrun")


def carried(table: EngineTable, written: list[str], typed: tuple[tuple[str, ...], ...]) -> list[str]:
    """The typed flags whose setting the export has not written itself, in the order typed."""
    have = {_dest(table, tok) for tok in written if tok.startswith("-")}
    out: list[str] = []
    for group in typed:
        if _dest(table, group[0]) not in have:
            out += group
    return out


def typed_dests(table: EngineTable, typed: tuple[tuple[str, ...], ...]) -> set[str]:
    return {_dest(table, g[0]) for g in typed}


def _dest(table: EngineTable, tok: str) -> str:
    arg = table.lookup(tok.partition("=")[0])
    return arg.dest if arg else tok
