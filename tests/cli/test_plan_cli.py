import json
import subprocess
import sys

import yaml
from click.testing import CliRunner

from dcpctl.cli.main import cli


def run(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_valid_plan_json_contract():
    r = run("plan", "--model-preset", "deepseek-v3.1", "--hardware", "h200-8", "--tp-size", "8", "--dcp-size",
            "8", "--format", "json")
    assert r.exit_code == 0
    d = json.loads(r.output)
    assert d["valid"] is True and d["violations"] == [] and isinstance(d["warnings"], list)
    assert d["groups"]["dcp"] == [list(range(8))] and set(d["groups"]) >= {"tp", "attn_tp", "attn_dp", "dcp"}
    assert set(d["decisions"]["dcp_comm_backend"]) == {"value", "reason"}
    assert d["decisions"]["dcp_replicate_q_proj"]["value"] is False
    assert d["memory"]["kv_bytes_per_token"] == 70272
    assert d["memory"]["kv_bytes_per_token_per_rank"] == 8784


def test_invalid_plan_exits_2_with_equation():
    r = run("plan", "--hardware", "h200-8", "--tp-size", "8", "--dp-size", "4", "--enable-dp-attention",
            "--dcp-size", "4", "--format", "json")
    assert r.exit_code == 2
    d = json.loads(r.output)
    assert d["valid"] is False
    assert d["violations"][0]["code"] == "dcp_containment"
    assert "attn_tp (2) = tp (8) // dp (4) is not a multiple of dcp (4)" in d["violations"][0]["message"]


def test_table_output_and_alias():
    r = run("plan", "--hardware", "h200-8", "--tp-size", "8", "--decode-context-parallel-size", "4")
    assert r.exit_code == 0
    assert ("VALID" in r.output and "Rank map" in r.output and "Decisions" in r.output
            and "[0-3]  [4-7]" in r.output)


def test_preset_with_override_and_yaml_save(tmp_path):
    out = tmp_path / "plan.yaml"
    r = run("plan", "--preset", "kimi-k3-32gpu-dpa-dcp8", "--dcp-size", "4", "--format", "yaml", "-o",
            str(out))
    assert r.exit_code == 0
    d = yaml.safe_load(out.read_text())
    assert d["topology"]["dcp_size"] == 4 and d["topology"]["dp_size"] == 4
    assert d["decisions"]["dcp_comm_backend"]["value"] == "fi_a2a"
    r2 = run("plan", str(out), "--format", "json")  # a saved plan is re-planned from its request
    assert json.loads(r2.output)["topology"]["dcp_size"] == 4


def test_user_errors_are_one_line_exit_2(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{oops")
    for args, msg in [
        (["--tp-size", "0"], "error: --tp-size must be a positive integer, got 0"),
        (["--preset", "nope"], "error: unknown preset 'nope'"),
        (["--model-path", str(tmp_path)], "config.json is not valid JSON (line 1, column 2"),
        (["--hardware", "h900"], "error: unknown hardware 'h900'"),
    ]:
        p = subprocess.run([sys.executable, "-m", "dcpctl.cli.main", "plan", *args], capture_output=True,
                           text=True)
        assert p.returncode == 2, args
        assert msg in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_debug_env_shows_traceback():
    p = subprocess.run([sys.executable, "-m", "dcpctl.cli.main", "plan", "--preset", "nope"],
                       capture_output=True, text=True, env={**__import__("os").environ, "DCPCTL_DEBUG": "1"})
    assert p.returncode == 2 and "Traceback" in p.stderr


def test_plan_never_imports_torch():
    code = ("import sys; from dcpctl.cli.main import main\n"
            "try:\n main(['plan','--tp-size','8','--dcp-size','8','--format','json'])\n"
            "except SystemExit: pass\nprint('torch' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.stdout.strip().endswith("False"), p.stdout + p.stderr


def test_presets_commands():
    r = run("presets", "list")
    assert r.exit_code == 0 and "kimi-k3-32gpu-dpa-dcp8" in r.output and "gb200-nvl72" in r.output
    r = run("presets", "show", "deepseek-v3.1-tp8-dcp8")
    assert r.exit_code == 0 and "dcp_size: 8" in r.output


def test_every_deployment_preset_plans_valid():
    from dcpctl.plan.presets import names
    for name in names("deployments"):
        r = run("plan", "--preset", name, "--format", "json")
        assert r.exit_code == 0, (name, r.output[:500])


def test_big_topology_is_interactive():
    r = run("plan", "--model-preset", "kimi-k2", "--hardware", "gb200-nvl72", "--tp-size", "1024",
            "--dp-size", "64", "--enable-dp-attention", "--dcp-size", "16", "--ep-size", "1024", "--nnodes",
            "256", "--format", "json")
    d = json.loads(r.output)
    assert len(d["rank_map"]) == 1024 and len(d["groups"]["dcp"]) == 64


def test_export_cli_writes_files(tmp_path):
    r = run("export", "sglang", "--preset", "kimi-k3-32gpu-dpa-dcp8", "-o", str(tmp_path))
    assert r.exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"node-{i}.sh" for i in range(8)]
    r = run("export", "sglang", "--tp-size", "8", "--dp-size", "4", "--enable-dp-attention", "--dcp-size",
            "4", "--hardware", "h200-8")
    assert r.exit_code == 2 and "the plan is invalid, nothing to export" in r.output


def test_recommend_cli():
    r = run("recommend", "--model-preset", "deepseek-v3.1", "--hardware", "h200-8", "--tp-size", "8",
            "--context-len", "131072", "--concurrency", "32", "--format", "json")
    assert r.exit_code == 0
    d = json.loads(r.output)
    # dcp 1; 2, 4, 8 x (ag_rs, a2a, a2a +repQ)
    assert d["recommendation"]["dcp_size"] == 8 and len(d["table"]) == 1 + 3 * 3
    assert {"choice", "8192", "131072"} <= set(d["crossovers"][0])
    r = run("recommend", "--model-preset", "deepseek-v3.1", "--hardware", "h200-8", "--concurrency", "2")
    assert r.exit_code == 2 and "needs --context-len" in r.output


def test_plan_estimate_with_concurrency():
    r = run("plan", "--preset", "deepseek-v3.1-tp8-dcp8", "--concurrency", "32", "--format", "json")
    e = json.loads(r.output)["estimate"]
    assert e["plan"]["choice"] == "dcp 8 a2a" and e["plan"]["fits"] and not e["dcp1"]["fits"]
    assert e["speedup_vs_dcp1"] > 1


def test_sglang_aliases_and_attn_dp_size():
    a = json.loads(run("plan", "--hardware", "h200-8", "--tensor-parallel-size", "8", "--attn-dp-size", "4",
                       "--dcp-size", "2", "--format", "json").output)
    b = json.loads(run("plan", "--hardware", "h200-8", "--tp-size", "8", "--dp-size", "4",
                       "--enable-dp-attention", "--dcp-size", "2", "--format", "json").output)
    assert a["groups"] == b["groups"] and a["topology"]["attn_tp_size"] == 2
    r = run("plan", "--hardware", "h200-8", "--tp-size", "8", "--attn-dp-size", "4", "--dp-size", "2")
    assert r.exit_code == 2 and "cannot both be > 1" in r.output


def test_multi_node_engine_replicas_rejected():
    d = json.loads(run("plan", "--hardware", "h200-8", "--tp-size", "8", "--dp-size", "2", "--nnodes", "2",
                       "--format", "json").output)
    assert [v["code"] for v in d["violations"]] == ["multi_node_dp"]


def test_plan_names_the_sglang_release_it_models():
    r = run("plan", "--model-preset", "deepseek-v3.1", "--hardware", "b200-8", "--tp-size", "8", "--dcp-size",
            "8", "--format", "json")
    d = json.loads(r.output)
    assert d["sglang_version"] == "0.5.23"
    # SGLang 0.5.23's defaults on an in-node Blackwell group: fi_a2a, trtllm_mla at page 64
    assert ([d["decisions"][k]["value"] for k in ("dcp_comm_backend", "decode_attention_backend",
                                                  "page_size")]
            == ["fi_a2a", "trtllm_mla", 64])
    r = run("plan", "--model-preset", "deepseek-v3.1", "--hardware", "h200-8", "--tp-size", "8", "--dcp-size",
            "8")
    assert "SGLang 0.5.23 rules" in r.output


def test_bf16_kv_spelling_and_new_spec_flags():
    r = run("plan", "--model-preset", "deepseek-v3.1", "--hardware", "b200-8", "--tp-size", "8", "--dcp-size",
            "8", "--kv-cache-dtype", "bf16", "--speculative-algorithm", "NEXTN", "--speculative-num-steps",
            "2", "--speculative-eagle-topk", "1", "--format", "json")
    d = json.loads(r.output)
    assert r.exit_code == 2 and [v["code"] for v in d["violations"]] == ["trtllm_dcp_spec"]
    assert d["decisions"]["kv_cache_dtype"]["value"] == "bfloat16"
    assert d["decisions"]["speculative_num_draft_tokens"]["value"] == 3
    r = run("plan", "--tp-size", "8", "--speculative-num-steps", "0")
    assert r.exit_code == 2 and "--speculative-num-steps must be a positive integer, got 0" in r.output
