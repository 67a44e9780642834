"""User mistakes: one sentence on stderr, exit status 2, no traceback, nothing started."""
import json
import shutil
import socket

import pytest
from click.testing import CliRunner

from dcpctl.cli.main import cli


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def assert_user_error(r, text):
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and "internal error" not in r.output
    assert text in r.output


@pytest.fixture
def tiny_dir(tmp_path):
    from dcpctl.runtime.tiny import ensure_tiny_model
    src = ensure_tiny_model()
    d = tmp_path / "ckpt"
    d.mkdir()
    for f in src.iterdir():
        if f.suffix == ".json":
            shutil.copy(f, d / f.name)
    return src, d


def test_binary_saved_plan(tmp_path):
    f = tmp_path / "plan.yaml"
    f.write_bytes(b"\x8f\xb8\x00\xff" * 20)
    assert_user_error(run("plan", f), "is not a text file")
    assert_user_error(run("launch", f, "--dry-run"), "is not a text file")
    assert_user_error(run("export", "sglang", f), "is not a text file")


def test_empty_saved_plan(tmp_path):
    f = tmp_path / "plan.yaml"
    f.write_text("")
    assert_user_error(run("plan", f), "is empty: expected a YAML mapping")


def test_saved_plan_request_must_be_a_mapping_of_known_options(tmp_path):
    f = tmp_path / "plan.yaml"
    f.write_text("request: [1, 2]\n")
    assert_user_error(run("plan", f), "'request' must be a mapping of plan options, not list")
    f.write_text("request: {tp_size: 2, bogus: 1}\n")
    assert_user_error(run("plan", f), "unknown plan option(s) ['bogus']")


def test_binary_or_incomplete_config_json(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "config.json").write_bytes(b"\x8f\xb8\x00\xff" * 20)
    assert_user_error(run("plan", "--model-path", tmp_path / "bin"), "is not a text file")
    (tmp_path / "part").mkdir()
    (tmp_path / "part" / "config.json").write_text(json.dumps(
        {"model_type": "deepseek_v3", "kv_lora_rank": 64, "num_hidden_layers": 2}))
    assert_user_error(run("plan", "--model-path", tmp_path / "part"),
                      "required key 'hidden_size' is missing")


def test_huge_sizes_are_refused_not_planned():
    assert_user_error(run("plan", "--tp-size", "100000000"), "--tp-size (100000000) is larger than")
    assert_user_error(run("plan", "--dcp-size", "100000000", "--format", "json"), "--dcp-size (100000000)")


def test_dcp_larger_than_tp_has_no_node_warning():
    r = run("plan", "--tp-size", "1", "--dcp-size", "8", "--format", "json")
    assert r.exit_code == 2
    d = json.loads(r.output)
    assert [v["code"] for v in d["violations"]] == ["tp_dcp"]
    assert not any("cross nodes" in w for w in d["warnings"])


def test_hardware_file_field_types(tmp_path):
    f = tmp_path / "hw.yaml"
    f.write_text("hardware: {name: x, device: cuda, gpu_name: g, gpus_per_node: 0, memory_gib: 80, sm: 90, "
                 "nvlink: true, mnnvl: false}\n")
    assert_user_error(run("plan", "--hardware", f),
                      "hardware field gpus_per_node must be a positive integer, got 0")
    f.write_text("hardware: {name: x, device: cuda, gpu_name: g, gpus_per_node: 8, memory_gib: .inf, sm: 90, "
                 "nvlink: true, mnnvl: false}\n")
    assert_user_error(run("plan", "--hardware", f),
                      "hardware field memory_gib must be a positive finite number, got inf")


def test_export_to_unwritable_dir(tmp_path):
    (tmp_path / "afile").write_text("x")
    assert_user_error(run("export", "sglang", "--preset", "deepseek-v3.1-tp8-dcp8", "-o",
                          tmp_path / "afile" / "sub"),
                      "cannot write to")


def test_recommend_contexts_must_be_positive():
    assert_user_error(run("recommend", "--context-len", "1000", "--concurrency", "4", "--contexts", "0,-5"),
                      "--contexts needs positive context lengths")


def test_launch_config_missing_keys(tmp_path):
    f = tmp_path / "launch.yaml"
    f.write_text("groups: 1\nworld_size: 2\n")
    assert_user_error(run("launch", f, "--dry-run"), "launch config has no model")


def test_launch_port_in_use_fails_before_loading():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert_user_error(run("launch", "--port", port), f"cannot serve on 127.0.0.1:{port}")


def test_launch_rank_error_is_printed_verbatim(monkeypatch):
    import dcpctl.launch.runner as runner

    class Failing:
        def __init__(self, *a, **k):
            self.proc = type("P", (), {"poll": lambda self: 1})()

        def wait_ready(self, stop):
            raise runner.RuntimeFailed("[rank 0] OSError: boom")

    monkeypatch.setattr(runner, "ServeProcess", Failing)
    r = run("launch", "--port", "0")
    assert r.exit_code == 1
    assert "error: [rank 0] OSError: boom" in r.output and "\\[" not in r.output


def test_generate_missing_or_truncated_weights(tiny_dir):
    src, d = tiny_dir
    assert_user_error(run("generate", "--model-path", d, "--prompt-ids", "1,2"),
                      "no *.safetensors weights in")
    data = (src / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 2])
    assert_user_error(run("generate", "--model-path", d, "--prompt-ids", "1,2"),
                      "model.safetensors is truncated")
    (d / "model.safetensors").write_bytes(data[:100])
    assert_user_error(run("generate", "--model-path", d, "--prompt-ids", "1,2"), "is not a safetensors file")


def test_generate_past_max_position_embeddings():
    assert_user_error(run("generate", "--prompt-ids", "1", "--max-new-tokens", "3000"),
                      "exceeds the model's max_position_embeddings (2048)")


def test_generate_negative_prompt_id_message():
    assert_user_error(run("generate", "--prompt-ids", "1,-2"), "--prompt-ids must be non-negative token ids")


def test_plan_concurrency_without_a_model():
    assert_user_error(run("plan", "--tp-size", "8", "--concurrency", "4"), "--concurrency needs a model")


def test_kda_state_fraction_range():
    assert_user_error(run("plan", "--kda-state-fraction", "-1"),
                      "--kda-state-fraction must be in (0, 1], got -1.0")


def test_pd_peer_options_without_mode_are_reported():
    r = run("plan", "--tp-size", "2", "--dcp-size", "2", "--disaggregation-peer-dcp-size", "4", "--format",
            "json")
    assert r.exit_code == 0
    assert any("--disaggregation-peer-dcp-size ignored" in w for w in json.loads(r.output)["warnings"])


def test_launch_refuses_pd_with_one_line():
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "dcpctl.cli.main", "launch", "--tp-size", "2", "--dcp-size",
                        "2", "--disaggregation-mode", "decode", "--disaggregation-peer-dcp-size", "1"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "serves PD disaggregation only in batch mode" in p.stderr
    assert "Traceback" not in p.stderr


def test_dcp_1_over_a_preset_with_an_exchange_backend_plans():
    # the default tiny-cpu recipe pins a2a; typing only --dcp-size 1 must not fail on a flag the user never
    # typed
    r = run("plan", "--preset", "tiny-cpu", "--dcp-size", "1", "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["decisions"]["dcp_comm_backend"]["value"] == "ag_rs"
    typed = run("plan", "--preset", "tiny-cpu", "--dcp-size", "1", "--dcp-comm-backend", "a2a")
    assert typed.exit_code == 2 and "--dcp-comm-backend a2a needs dcp > 1" in typed.output


def test_ep_larger_than_tp_is_a_violation_not_a_crash():
    for args in (["--tp-size", "8", "--ep-size", "16"],
                 ["--model-preset", "deepseek-v3.1", "--hardware", "h200-8", "--tp-size", "8", "--ep-size",
                  "16"]):
        r = run("plan", *args, "--format", "json")
        assert r.exit_code == 2, r.output
        d = json.loads(r.stdout)
        assert [v["code"] for v in d["violations"]] == ["tp_ep"]
        assert "tp_size (8) % ep_size (16) != 0" in d["violations"][0]["message"]
        assert "rank_map" not in d
    assert_user_error(run("export", "sglang", "--tp-size", "8", "--ep-size", "16"), "nothing to export")


@pytest.mark.parametrize("request_doc, text", [
    ("{hardware: {name: x}}", "request.hardware must be a string, got {'name': 'x'}"),
    ("{speculative_algorithm: 7}", "request.speculative_algorithm must be one of EAGLE"),
    ("{kv_cache_dtype: int3}", "request.kv_cache_dtype must be one of auto"),
    ("{tp_size: '8'}", "request.tp_size must be an integer, got '8'"),
    ("{enable_dp_attention: 1}", "request.enable_dp_attention must be true or false, got 1"),
    ("{mem_fraction_static: true}", "request.mem_fraction_static must be a number, got True"),
])
def test_saved_plan_value_types(tmp_path, request_doc, text):
    f = tmp_path / "plan.yaml"
    f.write_text(f"request: {request_doc}\n")
    for cmd in (["plan", f], ["export", "sglang", f], ["launch", f, "--dry-run"]):
        assert_user_error(run(*cmd), text)


def test_bad_yaml_saved_plan(tmp_path):
    f = tmp_path / "plan.yaml"
    f.write_text("request: {tp_size: 8\n")
    assert_user_error(run("plan", f), "is not valid YAML (line 2, column 1)")


def test_missing_model_path_named_like_a_preset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for cmd in (["plan", "--model-path", "./DeepSeek-V3.1", "--tp-size", "8"],
                ["recommend", "--model", "deepseek-v3.1", "--context-len", "1000", "--concurrency", "1"],
                ["export", "sglang", "--model-path", "kimi-k2"]):
        r = run(*cmd)
        assert_user_error(r, "did you mean --model-preset")
    r = run("plan", "--model-path", "./nothing-here")
    assert_user_error(r, "cannot read nothing-here")


@pytest.mark.parametrize("change, text", [
    ({"architectures": True}, "architectures must be a list of class names, got True"),
    ({"layer_types": ["linear_attention"] * 4}, "the MLA (full attention) layers [] from layer_types"),
    ({"num_hidden_layers": 17034258734657}, "num_hidden_layers must be 1 to 4096"),
    ({"intermediate_size": float("-inf")}, "cannot convert float infinity to integer"),
    ({"v_head_dim": -5}, "model field(s) ['v_head_dim'] must be integers from 0 to"),
])
def test_config_json_values(tmp_path, change, text):
    from dcpctl.plan import presets
    (tmp_path / "config.json").write_text(json.dumps({**presets.get("models", "tiny")["config"], **change}))
    assert_user_error(run("plan", "--model-path", tmp_path), text)
