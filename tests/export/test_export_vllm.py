"""`dcpctl export vllm` (and slurm/k8s under --engine vllm): snapshots, per-node ranks, and the engine checks.

Regenerate after an intended change with UPDATE_SNAPSHOTS=1 and review the diff. That vLLM's own parser and
config accept these lines is tests/export/test_export_vllm_accepted.py (skipped without vLLM)."""
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from dcpctl.cli.main import cli
from dcpctl.launch.exports import EXPORTERS, ExportOptions
from dcpctl.plan.errors import UserError
from dcpctl.plan.planner import make_plan
from dcpctl.plan.resolve import request_from_options

SNAP = Path(__file__).parent / "snapshots"
CASES = {
    "vllm-v31-tp8": {"model": "deepseek-v3.1", "tp_size": 8, "dcp_size": 8},
    "vllm-k2-dp2-ep-2node": {"model": "kimi-k2", "tp_size": 8, "dp_size": 2, "enable_expert_parallel": True,
                             "dcp_size": 8, "nnodes": 2, "dcp_comm_backend": "a2a", "dcp_q_replicate": True},
    "vllm-v31-b200-fp8": {"model": "deepseek-v3.1", "hardware": "b200-8", "tp_size": 8, "dcp_size": 4,
                          "kv_cache_dtype": "fp8", "max_model_len": 131072},
}


def plan_of(case: str):
    return make_plan(request_from_options({"engine": "vllm", "hardware": "h200-8", **CASES[case]}))


def render(case: str, fmt: str) -> str:
    plan = plan_of(case)
    files = EXPORTERS[fmt](plan, ExportOptions(plan.request.model.extra["hf_repo"], "10.0.0.1:5000", 8000))
    return "".join(f"# ---- {name}\n{text}" for name, text in sorted(files.items()))


@pytest.mark.parametrize("fmt", ["vllm", "slurm", "k8s"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_snapshot(case, fmt):
    got = render(case, fmt)
    path = SNAP / f"{case}.{fmt}.txt"
    if os.environ.get("UPDATE_SNAPSHOTS") or not path.exists():
        path.write_text(got)
    assert got == path.read_text()


def test_every_resolved_setting_is_written():
    text = render("vllm-k2-dp2-ep-2node", "vllm")
    assert text.count("vllm serve") == 2 and text.count("--headless") == 1
    assert "--tensor-parallel-size 8 --data-parallel-size 2 --enable-expert-parallel" in text
    assert "--decode-context-parallel-size 8 --dcp-comm-backend a2a --dcp-q-replicate" in text
    assert "--node-rank 1 --master-addr 10.0.0.1 --master-port 5000 --headless" in text
    b200 = render("vllm-v31-b200-fp8", "vllm")
    assert "--attention-backend FLASHINFER_MLA --block-size 64 --kv-cache-dtype fp8" in b200
    assert "--max-model-len 131072" in b200


def test_templates_run_headless_on_workers_only():
    slurm = render("vllm-k2-dp2-ep-2node", "slurm")
    assert '--master-addr "$HEAD"' in slurm and '$([ "$SLURM_NODEID" -gt 0 ] && echo --headless)' in slurm
    k8s = render("vllm-k2-dp2-ep-2node", "k8s")
    leader, worker = k8s.split("workerTemplate")
    assert "--headless" not in leader and "--headless" in worker


@pytest.mark.parametrize("fmt", ["sglang", "torchrun"])
def test_sglang_formats_refuse_a_vllm_plan(fmt):
    with pytest.raises(UserError, match="export vllm"):
        EXPORTERS[fmt](plan_of("vllm-v31-tp8"), ExportOptions("m"))


def test_export_vllm_implies_the_engine():
    """`export vllm` plans under vLLM's rules without --engine vllm (and `export sglang` under SGLang's)."""
    flags = ["--model-preset", "deepseek-v3.1", "-tp", "8", "-dcp", "8", "--hardware", "h200-8"]
    r = CliRunner().invoke(cli, ["export", "vllm", *flags])
    assert r.exit_code == 0, r.output
    assert "vllm serve deepseek-ai/DeepSeek-V3.1 --tensor-parallel-size 8 --decode-context-parallel-size 8" in r.stdout
    r = CliRunner().invoke(cli, ["export", "--hardware", "h200-8", "vllm", "--model-preset", "deepseek-v3.1", "-tp", "8"])
    assert r.exit_code == 0 and "vllm serve" in r.stdout, r.output
    r = CliRunner().invoke(cli, ["export", "sglang", "--model-preset", "deepseek-v3.1", "--tp-size", "8",
                                 "--dcp-size", "8", "--hardware", "h200-8"])
    assert r.exit_code == 0 and "sglang serve" in r.stdout, r.output


def test_typed_flags_are_carried_and_memory_left_to_vllm():
    """Every passed-through flag rides on the line as typed; the memory share is written only when typed (unset,
    vLLM resolves 1.0 with its extensible KV cache, as the plan does); --attention-config's backend replaces
    --attention-backend (vLLM refuses both)."""
    flags = ["--model-preset", "deepseek-v3.1", "-tp", "8", "-dcp", "8", "--hardware", "h200-8",
             "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}', "--dtype", "half",
             "--attention-config.backend", "triton_mla"]
    r = CliRunner().invoke(cli, ["export", "vllm", *flags])
    assert r.exit_code == 0, r.output
    line = next(x for x in r.stdout.splitlines() if x.startswith("vllm serve"))
    assert "--speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 1}'" in line
    assert "--dtype half --attention-config.backend triton_mla" in line
    assert "--attention-backend" not in line and "--gpu-memory-utilization" not in line
    r = CliRunner().invoke(cli, ["export", "vllm", *flags[:8], "--gpu-memory-utilization", "0.85"])
    assert "--gpu-memory-utilization 0.85" in r.stdout, r.output
