"""`dcpctl plan/recommend --engine vllm` and a pasted `vllm serve` line through the CLI (click's runner)."""
import json

from click.testing import CliRunner

from dcpctl.cli.main import cli

DS = ["--model-preset", "deepseek-v3.1", "--hardware", "h200-8"]


def run(*args):
    return CliRunner().invoke(cli, list(args))


def test_plan_table_names_vllm_and_every_source():
    r = run("plan", "--engine", "vllm", *DS, "--tp-size", "8", "--dcp-size", "8")
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "vLLM 0.34.0 rules" in text
    for src in ("set_dcp_defaults", "_get_backend_priorities", "update_block_size_for_backend",
                "config/cache.py"):
        assert src in text.replace("│ ", "").replace(" │", ""), src


def test_vllm_aliases_equal_long_flags():
    short = json.loads(run("plan", "--engine", "vllm", *DS, "-tp", "8", "-dcp", "4", "--format", "json")
                       .stdout)
    long = json.loads(run("plan", "--engine", "vllm", *DS, "--tensor-parallel-size", "8",
                          "--decode-context-parallel-size", "4", "--format", "json").stdout)
    assert short["decisions"] == long["decisions"] and short["topology"] == long["topology"]
    r = run("plan", "--engine", "vllm", *DS, "-tp", "8", "--tp-size", "4")
    assert r.exit_code == 2 and "disagree" in r.output


def test_pasted_vllm_serve_line_is_the_same_plan():
    pasted = run("plan", "--hardware", "h200-8", "--format", "json", "--", "vllm", "serve",
                 "--model", "x", "-tp", "8", "-dcp", "8")
    # a model path that does not exist is a user error, one sentence, exit 2
    assert pasted.exit_code == 2 and "Traceback" not in pasted.output
    r = run("plan", "--hardware", "h200-8", "--model-preset", "deepseek-v3.1", "--format", "json", "--",
            "vllm", "serve", "-tp", "8", "-dcp", "8", "--gpu-memory-utilization", "0.9",
            "--enable-prefix-caching")
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and doc["engine"]["name"] == "vllm" and doc["topology"]["dcp_size"] == 8
    assert doc["decisions"]["gpu_memory_utilization"]["value"] == 0.9


def test_recommend_uses_vllms_backends():
    r = run("recommend", "--engine", "vllm", *DS, "--tp-size", "8", "--concurrency", "64", "--context-len",
            "32768", "--format", "json")
    doc = json.loads(r.stdout)
    labels = [row["choice"] for row in doc["table"]]
    assert "dcp 8 ag_rs +repQ" in labels and not any("fi_a2a" in x for x in labels)
    assert doc["recommendation"]["dcp_comm_backend"] in ("ag_rs", "a2a")


def test_vllm_spellings_need_the_vllm_engine():
    r = run("plan", *DS, "-tp", "8", "--block-size", "64")
    assert r.exit_code == 2 and "vLLM's spelling; add --engine vllm" in r.output
    r = run("plan", *DS, "--tp-size", "8", "--attention-backend", "FLASHMLA")
    assert r.exit_code == 2 and "is a vLLM backend" in r.output
