"""SGLang 0.5.23 as an engine target (the default): its rules are dcpctl's own (plan/decisions.py,
plan/kernels.py, plan/topology.py), its flags dcpctl's, its export `sglang serve` (launch/exports.py)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dcpctl.plan import decisions
from dcpctl.plan import request as R
from dcpctl.plan.engine_args import PassThrough, split
from dcpctl.plan.engine_target import EngineTarget
from dcpctl.plan.errors import UserError, divisors
from dcpctl.plan.sglang import SGLANG_VERSION
from dcpctl.plan.sglang_args import CARRY_AS_TYPED, SGLANG, sglang_table

if TYPE_CHECKING:
    from dcpctl.plan.cost import Choice
    from dcpctl.plan.errors import Violation
    from dcpctl.plan.request import PlanRequest


class SglangTarget(EngineTarget):
    name, label, version = "sglang", "SGLang", SGLANG_VERSION
    command = ("sglang", "serve")
    memory_option = "mem_fraction_static"
    port, image = 30000, "lmsysorg/sglang:latest"
    bundled_runtime = True
    attention_backends = R.DECODE_ATTENTION_BACKENDS
    cli_options, option_keys = None, ()  # dcpctl's plan flags are SGLang's names and aliases (cli/options.py)
    serve_args = "dcpctl.launch.exports:sglang_args"
    exporter = "dcpctl.launch.exports:export_sglang"

    def options(self, opts: dict[str, Any]) -> dict[str, Any]:
        return dict(opts)

    def violations(self, req: "PlanRequest", with_model: bool) -> list["Violation"]:
        m = req.model
        return req.topology.violations(num_heads=m.num_heads if with_model else None,
                                       num_layers=m.num_layers if with_model else None)

    def decide(self, req: "PlanRequest") -> decisions.Decisions:
        return decisions.decide(req)

    def candidates(self, req: "PlanRequest") -> list["Choice"]:
        from dcpctl.plan.cost import Choice
        t, hw = req.topology, req.hardware
        out = [Choice(1, "none", False)]
        for c in divisors(t.attn_tp)[1:]:
            # SGLang 0.5.23 replicates Q for any weights (block-FP8 too) and runs fi_a2a with or without it
            out += [Choice(c, "ag_rs", False), Choice(c, "a2a", False), Choice(c, "a2a", True)]
            if hw.is_sm100 and (hw.mnnvl or t.ranks_per_node % c == 0):
                out += [Choice(c, "fi_a2a", False), Choice(c, "fi_a2a", True)]
        return out

    def split_flags(self, args: list[str],
                    caller: dict[str, bool]) -> tuple[list[str], list[PassThrough], bool]:
        args, pasted = SGLANG.strip_launcher(list(args))
        mine, rest = split(SGLANG.table, SGLANG.rename(args, caller), caller, record=CARRY_AS_TYPED)
        return mine, rest, pasted

    def dest(self, token: str) -> str:
        name = token.partition("=")[0]
        arg = sglang_table().lookup(name)
        return arg.dest if arg else name

    def check_passed(self, groups: tuple[tuple[str, ...], ...]) -> None:
        for g in groups:
            split(sglang_table(), list(g), {})

    def check_export(self, req: "PlanRequest", fmt: str) -> None:
        """`sglang serve` runs on GPUs over NCCL with SGLang's KV dtypes: a plan for the CPU (gloo) or with a
        KV dtype only the bundled runtime stores is refused in one sentence that says what to use instead."""
        r, table = req, sglang_table()
        kv_choices = table.by_dest["kv_cache_dtype"].choices or ()
        if r.kv_cache_dtype not in kv_choices:
            raise UserError(f"export {fmt}: --kv-cache-dtype {r.kv_cache_dtype} exists only in the bundled "
                            f"runtime; {table.label} takes {', '.join(kv_choices)} (export torchrun runs it "
                            "as planned)")
        if r.hardware.device != "cuda":
            raise UserError(f"export {fmt}: the plan is for {r.hardware.name} hardware (CPU, gloo), which "
                            "only the bundled runtime runs; plan for a GPU profile (--hardware h200-8, "
                            "b200-8, ...) or export torchrun")
