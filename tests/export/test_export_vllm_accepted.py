"""`dcpctl export vllm` lines for the DeepSeek-V3.1 and Kimi K2 presets are accepted by vLLM 0.34.0's own code.

vLLM's parser, `create_engine_config`, attention selection and block-size check run in the vLLM venv
(benchmarks/vllm/setup_venv.sh; $VLLM_PYTHON, default /tmp/vllmvenv/bin/python) through
benchmarks/vllm/vllm_grid_worker.py on an emulated GPU; skipped when that venv is absent (CI replays the
recorded grid instead: tests/plan/test_vllm_grid.py). The resolved settings must be the plan's.
"""
import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from dcpctl.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
VLLM_PY = os.environ.get("VLLM_PYTHON", "/tmp/vllmvenv/bin/python")
pytestmark = pytest.mark.skipif(not Path(VLLM_PY).exists(), reason=f"no vLLM venv at {VLLM_PY}")

CASES = {
    "dsv31-h200-tp8-dcp8": ("deepseek-v3.1", "h200-8", ["-tp", "8", "-dcp", "8"]),
    "dsv31-b200-tp8-dcp8-a2a-qrep": ("deepseek-v3.1", "b200-8", ["-tp", "8", "-dcp", "8", "--dcp-comm-backend", "a2a",
                                                                 "--dcp-q-replicate"]),
    "dsv31-h200-2node-fp8kv": ("deepseek-v3.1", "h200-8", ["-tp", "16", "-dcp", "8", "--nnodes", "2",
                                                           "--kv-cache-dtype", "fp8"]),
    "kimi-k2-h200-dp2-ep-dcp8": ("kimi-k2", "h200-8", ["-tp", "8", "-dp", "2", "-ep", "-dcp", "8", "--nnodes", "2"]),
    "kimi-k2-b200-tp8-dcp4": ("kimi-k2", "b200-8", ["-tp", "8", "-dcp", "4", "--max-model-len", "131072"]),
    "dsv31-h200-typed": ("deepseek-v3.1", "h200-8", ["-tp", "8", "-dcp", "8", "--dtype", "half", "--enforce-eager",
                                                     "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}',
                                                     "--attention-config.backend", "flashmla", "--max-model-len", "64k"]),
    "dsv31-b200-memory": ("deepseek-v3.1", "b200-8", ["-tp", "8", "-dcp", "8", "--gpu-memory-utilization", "0.85",
                                                      "--max-num-batched-tokens", "16k"]),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from benchmarks.vllm import vllm_grid_cases
    return vllm_grid_cases.write_models(tmp_path_factory.mktemp("vllm-export-models"))


def _nodes(flags: list[str], out: Path) -> list[list[str]]:
    r = CliRunner().invoke(cli, ["export", "vllm", *flags, "-o", str(out)])
    assert r.exit_code == 0, r.output
    return [shlex.split([x for x in p.read_text().splitlines() if x and not x.startswith("#")][-1])
            for p in sorted(out.glob("node-*.sh"))]


@pytest.mark.parametrize("case", sorted(CASES))
def test_vllm_accepts_the_export(case, models, tmp_path):
    model, hw, flags = CASES[case]
    plan_flags = ["--model-path", str(models[model]), "--hardware", hw, *flags]
    plan = json.loads(CliRunner().invoke(cli, ["plan", "--engine", "vllm", *plan_flags, "--format", "json"]).stdout)
    argvs = [["--model", argv[2], *argv[3:]] for argv in _nodes(plan_flags, tmp_path)]
    assert all(a[:2] == ["--model", str(models[model])] for a in argvs)
    r = subprocess.run([VLLM_PY, str(ROOT / "benchmarks/vllm/vllm_grid_worker.py"), hw], capture_output=True, text=True,
                       input="".join(json.dumps(a) + "\n" for a in argvs),
                       env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR", "HF_HUB_OFFLINE": "1"})
    results = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert len(results) == len(argvs), r.stderr[-800:]
    d, t = plan["decisions"], plan["topology"]
    for res in results:
        assert res["accepted"], res
        got = res["resolved"]
        assert (got["tp"], got["dcp"], got["nnodes"]) == (t["attn_tp_size"], t["dcp_size"], t["nnodes"])
        assert got["dcp_comm_backend"] == d["dcp_comm_backend"]["value"]
        assert got["dcp_q_replicate"] == d["dcp_replicate_q_proj"]["value"]
        assert got["attention_backend"] == d["decode_attention_backend"]["value"]
        assert got["block_size"] == d["page_size"]["value"]
        kv = got["model_dtype"] if got["kv_cache_dtype"] == "auto" else got["kv_cache_dtype"]
        assert kv == d["kv_cache_dtype"]["value"]
        assert got["gpu_memory_utilization"] == d["gpu_memory_utilization"]["value"]
        assert got["cp_kv_cache_interleave_size"] == d["cp_kv_cache_interleave_size"]["value"]
