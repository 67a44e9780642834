"""`dcpctl plan` without a model: a verdict from the topology and the hardware alone (docs/design.md
section 8)."""
import json

from click.testing import CliRunner

from dcpctl.cli.main import cli


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def plan_json(*args):
    r = run("plan", *args, "--format", "json")
    return r.exit_code, json.loads(r.stdout)


def test_design_example_is_valid_without_a_model():
    code, d = plan_json("--tp-size", "64", "--dp-size", "4", "--enable-dp-attention", "--dcp-size", "16")
    assert code == 0 and d["valid"] is True and d["violations"] == []
    assert d["topology_only"] is True and d["model"] is None and d["memory"] == {}
    assert any(s.startswith("heads:") for s in d["skipped_checks"])
    assert d["groups"]["dcp"] == d["groups"]["attn_dp"] == [list(range(i, i + 16)) for i in range(0, 64, 16)]
    assert len(d["rank_map"]) == 64 and d["rank_map"][17]["dcp_rank"] == 1
    assert set(d["decisions"]) >= {"dcp_comm_backend", "dcp_replicate_q_proj"}


def test_topology_rules_still_apply_without_a_model():
    code, d = plan_json("--tp-size", "64", "--dp-size", "4", "--enable-dp-attention", "--dcp-size", "32")
    assert code == 2 and [v["code"] for v in d["violations"]] == ["dcp_containment"]
    code, d = plan_json("--tp-size", "16", "--dcp-size", "8", "--nnodes", "2", "--hardware", "h200-8",
                        "--dcp-comm-backend", "fi_a2a")
    assert code == 2 and {v["code"] for v in d["violations"]} == {"fi_a2a_hardware"}


def test_hardware_decisions_without_a_model():
    code, d = plan_json("--tp-size", "8", "--dcp-size", "8", "--hardware", "b200-8")
    assert code == 0 and d["decisions"]["dcp_comm_backend"]["value"] == "fi_a2a"
    code, d = plan_json("--tp-size", "16", "--dcp-size", "16", "--nnodes", "2", "--hardware", "h200-8")
    assert code == 0 and d["decisions"]["dcp_comm_backend"]["value"] == "a2a"
    assert any("cross nodes" in w for w in d["warnings"])


def test_heads_rule_is_skipped_not_failed():
    # the built-in tiny model has 8 heads: attn_tp 16 failed the heads rule when plan silently planned it
    code, d = plan_json("--tp-size", "16", "--dcp-size", "16")
    assert code == 0 and d["topology"]["kernel_heads"] is None


def test_table_lists_the_skipped_checks():
    r = run("plan", "--tp-size", "8", "--dcp-size", "4")
    assert r.exit_code == 0
    assert "Topology-only verdict" in r.output and "pp_layers" in r.output and "Memory" not in r.output


def test_no_flags_plans_what_launch_runs():
    r = run("plan", "--format", "json")
    assert r.exit_code == 0 and "preset tiny-cpu" in r.stderr
    d = json.loads(r.stdout)
    assert d["model"]["name"] == "tiny" and d["topology"]["tp_size"] == 2 and d["topology"]["dcp_size"] == 2
    assert "topology_only" not in d


def test_saved_topology_only_plan_stays_topology_only(tmp_path):
    out = tmp_path / "plan.yaml"
    assert run("plan", "--tp-size", "8", "--dcp-size", "8", "-o", out).exit_code == 0
    code, d = plan_json(out)
    assert code == 0 and d["topology_only"] is True


def test_concurrency_estimate_needs_a_model():
    r = run("plan", "--tp-size", "8", "--context-len", "1000", "--concurrency", "4")
    assert r.exit_code == 2 and "--concurrency needs a model" in r.output
