"""vLLM 0.34.0 as an engine target (`--engine vllm`): its vocabulary (plan/vllm_args.py, cli/vllm_options.py),
its rules and defaults (plan/vllm_plan.py, plan/vllm_backends.py) and its export `vllm serve`
(launch/export_vllm.py)."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from dcpctl.plan import vllm_args, vllm_backends, vllm_plan, vllm_read, vllm_rules, vllm_settings
from dcpctl.plan.engine_args import PassThrough
from dcpctl.plan.engine_target import EngineTarget
from dcpctl.plan.hf_config import parse_hf_config
from dcpctl.plan.model import project
from dcpctl.plan.vllm import VLLM_VERSION

if TYPE_CHECKING:
    from dcpctl.plan.cost import Choice
    from dcpctl.plan.decisions import Decisions
    from dcpctl.plan.errors import Violation
    from dcpctl.plan.request import PlanRequest


class VllmTarget(EngineTarget):
    name, label, version = "vllm", "vLLM", VLLM_VERSION
    command = ("vllm", "serve")
    memory_option = "gpu_memory_utilization"
    port, image = 8000, f"vllm/vllm-openai:v{VLLM_VERSION}"
    bundled_runtime = False
    attention_backends = vllm_backends.NAMES
    cli_options, option_keys = "dcpctl.cli.vllm_options:OPTIONS", vllm_args.OPTION_KEYS
    serve_args = "dcpctl.launch.export_vllm:vllm_args"
    exporter = "dcpctl.launch.export_vllm:export_vllm"

    def options(self, opts: dict[str, Any]) -> dict[str, Any]:
        out = vllm_args.fold(opts)
        settings = vllm_settings.read(out)
        be = vllm_settings.config_backend(settings, out.get("attention_backend"))
        out["attention_backend"] = None if be == "auto" else be
        vllm_args.check_engine_names(out)
        vllm_rules.refuse(out, settings)
        if out.get("mem_fraction_static") is None:
            out["mem_fraction_static"] = vllm_settings.memory_default(settings)[0]
        return vllm_args.to_plan_options(out)

    def refuse_names(self, opts: dict[str, Any], chosen: EngineTarget) -> None:
        vllm_args.refuse_vllm_names(opts, chosen.label, chosen.attention_backends)

    def prepare(self, req: "PlanRequest") -> "PlanRequest":
        """--hf-overrides merged into the model's config.json, as vLLM loads it."""
        over = vllm_settings.hf_overrides(vllm_settings.read(req.engine_args))
        config = req.model.extra.get("config")
        if not over or not isinstance(config, dict):
            return req
        merged = vllm_read._merge(config, [], over)   # nested mappings merged key by key
        model = project(parse_hf_config(merged, f"{req.model.name} with --hf-overrides"), req.model.name)
        model.extra.update({k: v for k, v in req.model.extra.items() if k != "config"})
        return replace(req, model=model)

    def violations(self, req: "PlanRequest", with_model: bool) -> list["Violation"]:
        return vllm_plan.topology_violations(req, with_model)

    def decide(self, req: "PlanRequest") -> "Decisions":
        return vllm_plan.decide(req)

    def candidates(self, req: "PlanRequest") -> list["Choice"]:
        return vllm_plan.candidates(req)

    def spelling(self, req: "PlanRequest") -> str | None:
        t = req.topology
        dp = t.attn_dp if t.enable_dp_attention else t.dp_size
        return (f"vllm serve: -tp {t.attn_tp} -dp {dp} -pp {t.pp_size} -dcp "
                f"{t.dcp_size}{' -ep' if t.ep_size > 1 else ''}")

    def split_flags(self, args: list[str],
                    caller: dict[str, bool]) -> tuple[list[str], list[PassThrough], bool]:
        mine, rest = vllm_read.split_line(args, caller)
        return mine, rest, False

    def dest(self, token: str) -> str:
        name = vllm_read.normalize(token).partition("=")[0].split(".")[0]
        arg = vllm_read.table().lookup(name)
        return arg.dest if arg else name

    def check_passed(self, groups: tuple[tuple[str, ...], ...]) -> None:
        vllm_args.check_passed(groups)

    reads_pasted = True

    def parse_pasted(self, argv: list[str]) -> tuple[dict[str, Any], list[PassThrough]]:
        return vllm_args.parse_serve(argv)
