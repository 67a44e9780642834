"""Every `sglang serve` flag on plan/export/recommend (SGLang 0.5.23's own table), pasted lines, model ids,
exports."""
import json
import shlex
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from dcpctl.launch.device import resolve_device
from dcpctl.cli.main import cli
from dcpctl.plan.sglang_args import sglang_table

ROOT = Path(__file__).resolve().parents[2]
LINES = yaml.safe_load((ROOT / "tests/fixtures/sglang_serve_lines.yaml").read_text())["lines"]
RECORD = json.loads((ROOT / "benchmarks/data/sglang_pasted_lines.json").read_text())
H200 = ["--hardware", "h200-8"]


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def plan_json(*args):
    r = run("plan", "--format", "json", *args)
    assert r.exit_code in (0, 2), r.output
    return json.loads(r.stdout[r.stdout.index("{"):])


def exported_argv(*args, node=0, role="null"):
    r = run("export", "sglang", *args)
    assert r.exit_code == 0, r.output
    name = f"node-{node}.sh" if role == "null" else f"{role}-node-{node}.sh"
    script = r.stdout.split(f"# ---- {name}\n")[1].split("# ---- ")[0]
    return shlex.split([x for x in script.splitlines() if x and not x.startswith("#")][-1])


def test_table_is_sglangs_own():
    t = sglang_table()
    assert (t.engine, t.version, len(t.args) > 400) == ("sglang", "0.5.23", True)
    assert t.lookup("--context-length").dest == "context_length"
    assert t.lookup("--tp").dest == "tp_size" and t.lookup("--trust-remote").dest == "trust_remote_code"


def test_pasted_line_plans_with_pass_through():
    p = plan_json(*H200, "--", "sglang", "serve", "--model-path", "deepseek-ai/DeepSeek-V3.1", "--tp", "8",
                  "--trust-remote-code", "--context-length", "65536", "--chat-template", "t.jinja")
    assert p["valid"] and p["model"]["name"] == "deepseek-v3.1" and p["topology"]["tp_size"] == 8
    assert p["options"]["context_len"] == 65536
    assert p["passed_through"] == [["--trust-remote-code"], ["--chat-template", "t.jinja"]]


def test_python_m_launch_server_and_positional_model():
    p = plan_json(*H200, "python3", "-m", "sglang.launch_server", "--model", "deepseek-ai/DeepSeek-R1",
                  "--tp", "8")
    assert p["valid"] and p["model"]["name"] == "deepseek-v3"
    p = plan_json(*H200, "--", "sglang", "serve", "deepseek-ai/DeepSeek-V3.1", "--tp-size", "8")
    assert p["model"]["name"] == "deepseek-v3.1"


def test_unknown_flag_names_the_nearest_sglang_flag():
    r = run("plan", "--model-preset", "deepseek-v3.1", "--tp", "8", "--cuda-graph-max-bz", "8")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.output.strip() == ("error: --cuda-graph-max-bz is not an option of dcpctl or of `sglang serve` "
                                "(sglang 0.5.23); the nearest is --cuda-graph-max-bs-decode")
    r = run("plan", "--model-preset", "deepseek-v3.1", "--schedule-policy", "nope")
    assert r.exit_code == 2 and "--schedule-policy nope is not accepted by `sglang serve`" in r.output


def test_context_len_alias_and_hub_id_said_once():
    r = run("plan", "--model-path", "deepseek-ai/DeepSeek-V3.1", "--tp", "8", "--context-len", "4096", *H200,
            "--format", "json")
    assert r.exit_code == 0 and r.stderr.count("model preset deepseek-v3.1") == 1
    assert json.loads(r.stdout)["options"]["context_len"] == 4096


def test_unknown_hub_id_names_the_presets():
    r = run("plan", "--model-path", "someone/Unknown-Model", "--tp", "8")
    assert r.exit_code == 2 and "deepseek-ai/DeepSeek-V3.1 (deepseek-v3.1)" in r.output
    assert "pass the directory" in r.output


def test_export_carries_pass_through_once():
    argv = exported_argv(*H200, "--", "sglang", "serve", "--model-path", "deepseek-ai/DeepSeek-V3.1", "--tp",
                         "8", "--trust-remote-code", "--attention-backend", "fa3", "--host", "1.2.3.4",
                         "--port", "8000")
    assert argv[:4] == ["sglang", "serve", "--model-path", "deepseek-ai/DeepSeek-V3.1"]
    assert argv.count("--trust-remote-code") == 1 and argv.count("--host") == 1 and argv.count("--port") == 1
    assert argv[argv.index("--host") + 1] == "1.2.3.4" and argv[argv.index("--port") + 1] == "8000"
    assert argv[argv.index("--attention-backend") + 1] == "fa3"  # SGLang's: the prefill kernel too
    assert argv[argv.index("--decode-attention-backend") + 1] == "fa3"


@pytest.mark.parametrize("fmt", ["sglang", "slurm", "k8s"])
def test_sglang_targets_refuse_runtime_only_options(fmt):
    r = run("export", fmt, "--model-preset", "tiny", "--hardware", "cpu", "--kv-cache-dtype", "float64")
    assert r.exit_code == 2 and r.output.count("\n") == 1
    assert f"export {fmt}: --kv-cache-dtype float64 exists only in the bundled runtime" in r.output
    r = run("export", fmt, "--model-preset", "tiny", "--hardware", "cpu")
    assert r.exit_code == 2 and "(CPU, gloo), which only the bundled runtime runs" in r.output


def test_torchrun_target_runs_runtime_only_options(tmp_path):
    r = run("export", "torchrun", "--preset", "tiny-cpu", "--kv-cache-dtype", "float64",
            "--trust-remote-code", "-o", tmp_path)
    assert r.exit_code == 0, r.output
    cfg = yaml.safe_load((tmp_path / "launch.yaml").read_text())
    assert cfg["model"]["dtype"] == "float64" and cfg["dist_backend"] == "gloo"  # KV in the compute dtype
    assert "not carried: --trust-remote-code" in r.stderr


@pytest.mark.parametrize("entry", LINES, ids=lambda e: e["source"].rsplit("/", 1)[-1][:40])
def test_published_line_plans_and_exports(entry):
    argv = shlex.split(entry["line"])
    hw = ["--hardware", entry["hardware"]]
    p = plan_json(*hw, "--", *argv)
    rec = next(r for r in RECORD["rows"] if r["line"] == entry["line"] and r["source"] == entry["source"])
    if not p["valid"]:
        assert (rec["status"] == "plan_invalid"
                and rec["violations"] == [v["message"] for v in p["violations"]])
        return
    rank = int(argv[argv.index("--node-rank") + 1]) if "--node-rank" in argv else 0
    exported = exported_argv(*hw, "--", *argv, node=rank,
                             role=p["request"].get("disaggregation_mode") or "null")
    for group in p["passed_through"]:
        i = exported.index(group[0])
        assert exported[i:i + len(group)] == group
    # SGLang 0.5.23 resolved the pasted and this exported line the same (benchmarks/sglang/check_pasted.py;
    # four mooncake lines are refused on both sides alike by the checking machine's missing InfiniBand)
    assert rec["status"] in ("same", "same_rejection") and rec["exported"] == exported[2:]


def test_record_covers_the_fixture():
    assert len(LINES) >= 40 and RECORD["sglang"] == "0.5.23"
    assert [(r["source"], r["line"]) for r in RECORD["rows"]] == [(e["source"], e["line"]) for e in LINES]


@pytest.mark.parametrize("choice,ranks,gpus,want", [("auto", 2, 0, "cpu"), ("auto", 2, 8, "cuda"),
                                                   ("auto", 2, 1, "cpu"), ("auto", None, 1, "cuda"),
                                                   ("cpu", 1, 8, "cpu"), ("cuda", 8, 0, "cuda")])
def test_device_auto(choice, ranks, gpus, want):
    assert resolve_device(choice, ranks_here=ranks, gpus=gpus) == want


def test_recommend_says_past_positions_not_never():
    r = run("recommend", "--model-preset", "deepseek-v3.1", *H200, "--tp", "8", "--context-length", "131072",
            "--concurrency", "32", "--contexts", "131072,262144", "--format", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["past_positions"] == {"contexts": [262144], "max_position_embeddings": 163840,
                                   "override": "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"}
    assert all(c["262144"] == "past_positions" and isinstance(c["131072"], (int, type(None)))
               for c in d["crossovers"])
    table = run("recommend", "--model-preset", "deepseek-v3.1", *H200, "--tp", "8", "--context-length",
                "262144", "--concurrency", "32")
    assert "never" not in table.stdout and "past positions" in table.stdout
    assert "past the model's 163,840 positions" in table.stdout


def test_saved_plan_keeps_pass_through_and_flags_replace_it(tmp_path):
    saved = tmp_path / "p.yaml"
    r = run("plan", *H200, "-o", saved, "--", "sglang", "serve", "--model-path", "deepseek-ai/DeepSeek-V3.1",
            "--tp", "8", "--trust-remote-code", "--chat-template", "t.jinja")
    assert r.exit_code == 0, r.output
    argv = exported_argv(saved, "--chat-template", "u.jinja")
    assert argv[-3:] == ["--trust-remote-code", "--chat-template", "u.jinja"] and "t.jinja" not in argv
