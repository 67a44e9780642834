"""Engine targets (plan/engine_target.py, plan/engines.py): plan/ asks "which target" once, then calls it."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from dcpctl.plan import engines
from dcpctl.plan.errors import UserError
from dcpctl.plan.planner import make_plan
from dcpctl.plan.resolve import request_from_options
from dcpctl.plan.sglang_target import SglangTarget

ROOT = Path(__file__).resolve().parents[2]
# each engine's own modules: the only ones that may name an engine in a comparison
ENGINE_MODULES = {"plan/vllm.py", "plan/vllm_args.py", "plan/vllm_backends.py", "plan/vllm_plan.py",
                  "plan/vllm_target.py", "cli/vllm_options.py", "launch/export_vllm.py",
                  "plan/sglang.py", "plan/sglang_args.py", "plan/sglang_target.py", "plan/engines.py"}
BRANCH = re.compile(r"""[!=]=\s*["'](vllm|sglang)["']|["'](vllm|sglang)["']\s*[!=]=""")


def test_no_engine_name_is_compared_outside_its_modules():
    hits = [f"{p.relative_to(ROOT / 'dcpctl')}:{i}" for p in sorted((ROOT / "dcpctl").rglob("*.py"))
            if str(p.relative_to(ROOT / "dcpctl")) not in ENGINE_MODULES
            for i, line in enumerate(p.read_text().splitlines(), 1) if BRANCH.search(line)]
    assert hits == []


def test_an_unknown_engine_names_the_targets():
    with pytest.raises(UserError,
                       match="--engine trt is not an engine dcpctl plans for; valid: sglang, vllm"):
        engines.target("trt")


class ToyTarget(SglangTarget):
    """A third engine: SGLang's rules under another name, version and export line."""
    name, label, version, command = "toy", "Toy", "9.9", ("toy", "serve")
    port, image, bundled_runtime = 9000, "toy:latest", False
    serve_args = "tests.plan.test_engine_targets:toy_args"


def toy_args(plan, opts, node_rank=0):
    return ["toy", "serve", opts.model_path, "--tp", str(plan.request.topology.tp_size)]


def test_a_third_engine_is_one_target_and_its_registration(monkeypatch):
    monkeypatch.setitem(engines.TARGETS, "toy", ToyTarget())
    req = request_from_options({"engine": "toy", "model": "deepseek-v3.1", "hardware": "h200-8", "tp_size": 8,
                                "dcp_size": 8})
    plan = make_plan(req)
    assert plan.valid and plan.to_dict()["engine"] == {"name": "toy", "version": "9.9"}
    from dcpctl.launch.export_common import ExportOptions
    from dcpctl.launch.exports import serve_args
    assert (serve_args(plan, ExportOptions("M", "H:1", 9000, image="toy:latest"))
            == ["toy", "serve", "M", "--tp", "8"])
    from dcpctl.launch.config import render_launch_config
    with pytest.raises(UserError, match="a --engine toy plan is for `dcpctl export toy` \\(Toy serves it\\)"):
        render_launch_config(plan, "M", "bfloat16", "cuda", 1024, 1024)
