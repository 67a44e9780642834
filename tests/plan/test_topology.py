import pytest

from dcpctl.plan.errors import UserError
from dcpctl.plan.groups import build_groups, collapse, rank_info
from dcpctl.plan.topology import Topology
from tests.plan.helpers import codes, plan


def msgs(t, heads=None):
    return [v.message for v in t.violations(num_heads=heads)]


def test_design_examples():
    ok = Topology(tp_size=64, dp_size=4, enable_dp_attention=True, dcp_size=16)
    assert ok.violations(num_heads=128) == []
    assert build_groups(ok)["dcp"] == build_groups(ok)["attn_dp"]  # four 16-rank replicas are the DCP groups
    assert msgs(Topology(tp_size=64, dp_size=4, enable_dp_attention=True, dcp_size=32)) == [
        "attn_tp (16) = tp (64) // dp (4) is not a multiple of dcp (32): a DCP group would cross "
        "attention-DP replicas; valid dcp sizes: [1, 2, 4, 8, 16]"]
    assert msgs(Topology(tp_size=8, dp_size=4, enable_dp_attention=True, dcp_size=4)) == [
        "attn_tp (2) = tp (8) // dp (4) is not a multiple of dcp (4): a DCP group would cross "
        "attention-DP replicas; valid dcp sizes: [1, 2]"]


def test_rule_messages():
    assert msgs(Topology(tp_size=8, dp_size=3, enable_dp_attention=True)) == [
        "tp (8) is not a multiple of dp (3) with --enable-dp-attention; valid dp sizes: [1, 2, 4, 8]"]
    assert msgs(Topology(tp_size=8, dcp_size=3)) == ["tp (8) is not a multiple of dcp (3); valid dcp sizes: "
                                                     "[1, 2, 4, 8]"]
    assert msgs(Topology(tp_size=8, ep_size=3)) == [
        "tp_size (8) % ep_size (3) != 0: SGLang's model runner stops at startup (tp_size must be divisible "
        "by ep_size); valid ep sizes: [1, 2, 4, 8]"]
    assert msgs(Topology(tp_size=8), heads=12) == [
        "num_attention_heads (12) is not a multiple of attn_tp (8); valid attn_tp sizes: [1, 2, 4]"]
    assert msgs(Topology(tp_size=8, nnodes=3)) == [
        "tp (8) * pp (1) = 8 is not a multiple of nnodes (3); valid nnodes: [1, 2, 4, 8]"]
    assert msgs(Topology(tp_size=16, gpus_per_node=8)) == [
        "total GPUs (16) // nnodes (1) = 16 > gpus_per_node (8); need nnodes >= 2"]
    assert ([v.message for v in Topology(pp_size=8).violations(num_layers=4)]
            == ["pp (8) > num_hidden_layers (4)"])


@pytest.mark.parametrize("bad", [0, -1, "2", 1.5, True])
def test_bad_sizes_are_user_errors(bad):
    with pytest.raises(UserError, match="--tp-size must be a positive integer"):
        Topology(tp_size=bad)


def test_rank_layout_tp_fastest():
    t = Topology(tp_size=8, dp_size=4, enable_dp_attention=True, dcp_size=2, pp_size=2, ep_size=4)
    g = build_groups(t)
    assert g["tp"] == [list(range(0, 8)), list(range(8, 16))]
    assert g["attn_tp"][:2] == [[0, 1], [2, 3]]
    assert g["attn_dp"][0] == [0, 1, 8, 9]  # replica 0 spans both pipeline stages
    assert g["ep"][0] == [0, 2, 4, 6]  # moe_tp 2: same moe-tp index across the 4 EP ranks
    r = rank_info(t, 11)
    assert (r.pp_rank, r.tp_rank, r.attn_dp_rank, r.attn_tp_rank, r.dcp_rank, r.ep_rank) == (1, 3, 1, 1, 1, 1)


def test_dp_without_dpa_runs_whole_engines():
    t = Topology(tp_size=4, dp_size=2, dcp_size=2)
    assert (t.world, t.total_gpus, t.attn_tp) == (4, 8, 4)
    assert build_groups(t)["tp"] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_collapse():
    assert collapse([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert collapse([]) == ""


def test_dcp_crossing_nodes_warns_without_mnnvl_only():
    p = plan(tp_size=16, dcp_size=16, nnodes=2, gpus_per_node=8)
    assert p.valid and any("cross nodes" in w for w in p.warnings)
    p = plan(hardware="gb200-nvl72", tp_size=16, dcp_size=8, nnodes=4)
    assert p.valid and not any("cross nodes" in w for w in p.warnings)


def test_node_fit_from_hardware_profile():
    assert "node_fit" in codes(plan(tp_size=16, dcp_size=8))  # h200-8 has 8 GPUs per node
    assert plan(tp_size=16, dcp_size=8, nnodes=2).valid
