
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dcpctl.plan.cost import Choice, Constants, layer_cost, load_calibration, with_bandwidth
from dcpctl.plan.errors import UserError
from dcpctl.plan.recommend import crossover, recommend
from dcpctl.plan.request import PlanRequest
from dcpctl.plan.topology import Topology
from tests.plan.helpers import hw, model

V3 = model("deepseek-v3")
K = Constants.from_hardware(hw("h200-8"))
choices = st.sampled_from([Choice(2, "ag_rs", False), Choice(4, "a2a", False), Choice(8, "a2a", True),
                           Choice(8, "ag_rs", False)])


@settings(max_examples=200, deadline=None)
@given(ch=choices, batch=st.integers(1, 256), L=st.integers(1, 1 << 20), more=st.integers(1, 1 << 20))
def test_more_context_never_makes_dcp_look_worse(ch, batch, L, more):
    # compared at whole stripes (multiples of 8): inside a stripe the busiest rank holds one row more
    L, more = L * 8, more * 8

    def ratio(ctx):
        return layer_cost(V3, 8, ch, batch, ctx, "bfloat16", K).layer_s / \
            layer_cost(V3, 8, Choice(1, "none", False), batch, ctx, "bfloat16", K).layer_s
    assert ratio(L + more) <= ratio(L) * (1 + 1e-9)


@settings(max_examples=200, deadline=None)
@given(ch=choices, batch=st.integers(1, 256), L=st.integers(1, 1 << 20), f=st.floats(1.0, 100.0))
def test_more_bandwidth_never_slower(ch, batch, L, f):
    slow = layer_cost(V3, 8, ch, batch, L, "bfloat16", K).layer_s
    fast = layer_cost(V3, 8, ch, batch, L, "bfloat16", with_bandwidth(K, f)).layer_s
    assert fast <= slow


def test_dcp_cuts_bytes_not_flops():
    one = layer_cost(V3, 8, Choice(1, "none", False), 32, 131072, "bfloat16", K)
    eight = layer_cost(V3, 8, Choice(8, "a2a", False), 32, 131072, "bfloat16", K)
    assert eight.kv_read_s * 8 == one.kv_read_s
    assert eight.attn_flops_s == one.attn_flops_s
    assert eight.exchange_s > 0 == one.exchange_s


def test_replicated_q_trades_gemm_for_a_collective():
    a = layer_cost(V3, 8, Choice(8, "a2a", False), 8, 8192, "bfloat16", K)
    b = layer_cost(V3, 8, Choice(8, "a2a", True), 8, 8192, "bfloat16", K)
    assert b.exchange_s < a.exchange_s and b.gemm_s > a.gemm_s


def req(**kw):
    return PlanRequest(Topology(tp_size=8), model(kw.pop("m", "deepseek-v3")), hw(kw.pop("h", "h200-8")),
                       **kw)


def test_recommendation_examples():
    long = recommend(req(), 131072, 32, K)["recommendation"]
    assert long["dcp_size"] == 8 and long["reason"].startswith("DCP 1 fits only 4 requests")
    short = recommend(req(), 1024, 1, K)["recommendation"]
    assert short["choice"] == "dcp 1" and "exchange costs more" in short["reason"]
    none = recommend(req(), 131072, 10_000, K)["recommendation"]
    assert none["choice"] is None and none["reason"].startswith("no choice fits 10000")
    past = recommend(req(), 1 << 20, 1, K)  # past V3's 163,840 positions: said so, not "no choice fits"
    assert past["recommendation"] == {"choice": None, "reason": "context 1,048,576 is past the model's "
                                      "163,840 positions (SGLang refuses it unless "
                                      "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1)"}
    assert ({row["note"] for row in past["table"]}
            == {past["recommendation"]["reason"][len("context 1,048,576 is "):]})


def test_crossover_falls_with_context():
    ch = Choice(8, "a2a", False)
    xs = [crossover(req(), ch, L, K) for L in (8192, 32768, 131072)]
    assert xs[0] > xs[1] >= xs[2] >= 1


def test_calibration_file_replaces_constants(tmp_path):
    f = tmp_path / "cal.yaml"
    f.write_text("calibration: {copy_tbps: 4.2, bf16_tflops: 750, a2a_latency_us: 22}\n")
    k = load_calibration(f, K)
    assert (k.hbm_bytes_per_s, k.flops_per_s, k.coll_latency_s) == (4.2e12, 750e12, 22e-6)
    assert k.link_bytes_per_s == K.link_bytes_per_s and "calibration" in k.source
    slower = layer_cost(V3, 8, Choice(1, "none", False), 32, 32768, "bfloat16", k).layer_s
    assert slower > layer_cost(V3, 8, Choice(1, "none", False), 32, 32768, "bfloat16", K).layer_s


def test_calibrated_efficiency_and_overhead(tmp_path):
    f = tmp_path / "cal.yaml"
    f.write_text("calibration: {copy_tbps: 4.2, bf16_tflops: 761, attn_efficiency: 0.5, layer_overhead_us: "
                 "200}\n")
    k = load_calibration(f, K)
    plain = replace(k, attn_efficiency=1.0, layer_overhead_s=0.0)
    a = layer_cost(V3, 8, Choice(1, "none", False), 32, 32768, "bfloat16", k)
    b = layer_cost(V3, 8, Choice(1, "none", False), 32, 32768, "bfloat16", plain)
    assert a.attention_s == 2 * b.attention_s
    assert a.layer_s - b.layer_s == pytest.approx(b.attention_s + 200e-6)
    f.write_text("calibration: {attn_efficiency: 1.5}\n")
    with pytest.raises(UserError, match="0 < attn_efficiency <= 1"):
        load_calibration(f, K)


def unknown_gpu(**figures):
    from dcpctl.plan.hardware import FIGURES
    return replace(hw("h200-8"), gpu_name="NVIDIA X", source="detected: nvml", **{f: 0.0 for f in FIGURES},
                   figures=tuple((f, "unknown: no built-in profile has NVIDIA X with 80.0 GiB")
                                 for f in FIGURES))


def test_unknown_figures_refuse_to_price():
    from dcpctl.plan.figures import UnknownFigures, constants_for
    with pytest.raises(UnknownFigures) as e:
        constants_for(unknown_gpu(), attn_tp=8)
    assert str(e.value) == (
        "the cost figures hbm_tbps, bf16_tflops, link_gbps, coll_latency_us of NVIDIA X (hardware h200-8) "
        "are unknown (no built-in profile has NVIDIA X with 80.0 GiB): pass --hardware with a profile or "
        "YAML file that has them, or --calibration with the file `dcpctl bench kernel --save-calibration "
        "FILE` and `dcpctl bench exchange --save-calibration FILE` writes")
    with pytest.raises(UnknownFigures, match=r"^the cost figures hbm_tbps, bf16_tflops of .*bench kernel "
                                             r"--save-calibration FILE` writes$"):
        constants_for(unknown_gpu(), attn_tp=1)   # one rank: no collective, no link figure needed


def test_profile_constants_have_no_placeholders():
    k = Constants.from_hardware(hw("h200-8"))
    assert ((k.hbm_bytes_per_s, k.flops_per_s, k.link_bytes_per_s, k.coll_latency_s)
            == pytest.approx((4.8e12, 989e12, 450e9, 15e-6)))
    zero = Constants.from_hardware(unknown_gpu())
    assert (zero.hbm_bytes_per_s, zero.flops_per_s, zero.link_bytes_per_s) == (0, 0, 0)


def test_calibration_fills_unknown_figures_and_says_so(tmp_path):
    from dcpctl.plan.figures import calibrated, constants_for
    f = tmp_path / "kernel.yaml"
    f.write_text("calibration: {copy_tbps: 4.2617, bf16_tflops: 789.35, attn_fixed_us: 17}\n")
    h = calibrated(unknown_gpu(), f)
    assert (h.hbm_tbps, h.bf16_tflops, h.link_gbps) == (4.2617, 789.35, 0.0)
    assert (h.figure_source("hbm_tbps") == f"calibration {f}"
            and h.figure_source("link_gbps").startswith("unknown"))
    k = constants_for(h, attn_tp=1, calibration=f)
    assert k.hbm_bytes_per_s == pytest.approx(4.2617e12) and k.attn_fixed_s == pytest.approx(17e-6)
    assert k.source == f"calibration {f}"
    g = calibrated(hw("h200-8"), f)   # measured figures replace the profile's, the rest stay the profile's
    assert g.figure_source("hbm_tbps") == f"calibration {f}" and g.figure_source("link_gbps") == "h200-8"
    assert constants_for(g, 8, f).source == f"calibration {f}, h200-8"
