import xml.etree.ElementTree as ET

import pytest

from dcpctl.plan.errors import UserError
from tests.plot.helpers import PNG_MAGIC, plan_doc

pytest.importorskip("matplotlib")
from dcpctl.plot.output import save  # noqa: E402
from dcpctl.plot.rankmap import offending_dcp_groups, rank_map_figure  # noqa: E402


def drawn(fig, gid):
    ax = fig.axes[0]
    return [a for a in [*ax.patches, *ax.lines] if a.get_gid() == gid]


def caption(fig):
    return "\n".join(t.get_text() for t in fig.texts)


def test_kimi_k3_32gpu_rank_map():
    fig = rank_map_figure(plan_doc("kimi-k3-32gpu-dpa-dcp8"))
    assert len(drawn(fig, "gpu-cell")) == 32 and drawn(fig, "gpu-cell-violation") == []
    # 4 attention-DP replicas of 8 ranks on 4-GPU trays: each replica is outlined on its 2 trays
    assert len(drawn(fig, "attn-dp-outline")) == 8
    # each DCP group of 8 continues once onto the next tray (MNNVL: dashed, blue)
    edges = drawn(fig, "node-edge")
    assert len(edges) == 4 and {e.get_linestyle() for e in edges} == {"--"}
    colours = {c.get_facecolor() for c in drawn(fig, "gpu-cell")}
    assert len(colours) == 4  # one colour per DCP group
    assert caption(fig).startswith("VALID: kimi-k3 on gb200-nvl72: TP 32, attention DP 4 (attn_tp 8), DCP 8")


def test_single_node_group_has_no_node_edge():
    fig = rank_map_figure(plan_doc("deepseek-v3.1-tp8-dcp8"))
    assert len(drawn(fig, "gpu-cell")) == 8 and len(drawn(fig, "attn-dp-outline")) == 1
    assert drawn(fig, "node-edge") == []


def test_group_leaving_nvlink_is_a_solid_red_edge():
    fig = rank_map_figure(plan_doc(hardware="h200-8", tp_size=16, dcp_size=16, nnodes=2))
    edges = drawn(fig, "node-edge")
    assert len(edges) == 1 and edges[0].get_linestyle() == "-" and edges[0].get_color() == "#c0001a"


@pytest.mark.parametrize("flags, code, bad", [
    ({"hardware": "h200-8", "tp_size": 8, "dp_size": 4, "enable_dp_attention": True, "dcp_size": 4},
     "dcp_containment", 8),
    ({"preset": "kimi-k3-32gpu-dpa-dcp8", "dcp_size": 16}, "dcp_containment", 32),
    ({"hardware": "h200-8", "tp_size": 8, "dcp_size": 16}, "tp_dcp", 8),
])
def test_violation_groups_are_drawn_in_the_violation_colour(flags, code, bad):
    doc = plan_doc(**flags)
    assert not doc["valid"]
    fig = rank_map_figure(doc)
    cells = drawn(fig, "gpu-cell-violation")
    assert len(cells) == bad and len(drawn(fig, "gpu-cell")) == doc["topology"]["total_gpus"] - bad
    assert {c.get_hatch() for c in cells} == {"///"}
    text = caption(fig)
    assert text.startswith("INVALID") and f"\n{code}: " in text


def test_only_groups_that_leave_an_attention_tp_group_are_offending():
    doc = plan_doc(hardware="h200-8", tp_size=8, dp_size=2, enable_dp_attention=True, dcp_size=4, ep_size=3)
    assert [v["code"] for v in doc["violations"]] == ["tp_ep"] and offending_dcp_groups(doc) == set()
    fig = rank_map_figure(doc)
    assert len(drawn(fig, "gpu-cell")) == 8 and "\ntp_ep: tp_size (8) % ep_size (3) != 0" in caption(fig)


def test_no_rank_layout_still_draws_the_gpus_and_names_the_violation():
    doc = plan_doc(hardware="h200-8", tp_size=8, dp_size=3, enable_dp_attention=True)
    assert doc["groups"] == {}
    fig = rank_map_figure(doc)
    assert len(drawn(fig, "gpu-cell")) == 8 and drawn(fig, "attn-dp-outline") == []
    assert "\ntp_dp: tp (8) is not a multiple of dp (3)" in caption(fig)


def test_saved_png_and_svg(tmp_path):
    fig = rank_map_figure(plan_doc("kimi-k3-32gpu-dpa-dcp8"))
    png, svg = tmp_path / "ranks.png", tmp_path / "ranks.SVG"
    save(fig, str(png))
    save(fig, str(svg))
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 10_000
    assert ET.parse(svg).getroot().tag == "{http://www.w3.org/2000/svg}svg"


def test_too_many_gpus_is_a_user_error():
    doc = plan_doc(hardware="gb200-nvl72", tp_size=2048, nnodes=512)
    with pytest.raises(UserError, match="draws at most 1024 GPUs and this plan has 2048"):
        rank_map_figure(doc)


def test_whole_engine_replicas_and_pipeline_stages():
    doc = plan_doc(hardware="cpu", tp_size=2, pp_size=2, dp_size=2, dcp_size=2)
    fig = rank_map_figure(doc)
    labels = [t.get_text() for t in fig.axes[0].texts if t.get_text().startswith("engine")]
    assert labels == ["engine 0", "engine 1"] and len(drawn(fig, "attn-dp-outline")) == 2
    assert len({c.get_facecolor() for c in drawn(fig, "gpu-cell")}) == 4  # tp 2 x pp 2 x 2 engines / dcp 2
    assert "PP 2, 2 whole-engine replicas (DP 2 without attention DP)" in " ".join(caption(fig).split())
