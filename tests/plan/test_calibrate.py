import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from dcpctl.plan.calibrate import fit_exchange, fit_kernel, merge_calibration
from dcpctl.plan.cost import Choice, Constants, interpolate_log2, layer_cost, load_calibration
from dcpctl.plan.errors import UserError
from tests.plan.helpers import hw, model

V3 = model("deepseek-v3")
K = Constants.from_hardware(hw("h200-8"))
R, V = 576, 512


def kernel_doc(eff, fixed, copy_tbps=4.0, tflops=800.0):
    """A `bench kernel --format json` document whose times follow time = fixed + roofline / eff[heads]."""
    cells = []
    for h in eff:
        for ctx in (8192, 65536):
            for b in (1, 8, 64):
                nbytes, flops = b * ctx * R * 2 + b * h * (R + V) * 2, 2 * b * h * ctx * (R + V)
                roof = max(nbytes / (copy_tbps * 1e12), flops / (tflops * 1e12)) * 1e6
                cells.append({"heads": h, "ctx": ctx, "batch": b, "roofline_us": roof,
                              "time_us": fixed + roof / eff[h]})
    return {"calibration": {"copy_tbps": copy_tbps, "bf16_tflops": tflops}, "cells": cells}


def exchange_doc(a2a_lat, a2a_gbps, lat, gbps, c=2, heads=128):
    rows = []
    for b in (1, 8, 32, 64):
        n = b * heads * (V + 2) * 2
        rows.append({"batch": b, "bytes_per_rank": n, "packed_graph_us": a2a_lat + n / (a2a_gbps * 1e3),
                     "raw_graph_us": lat + n * (c - 1) / c / (gbps * 1e3)})
    return {"dcp": c, "kernel_heads": heads, "v_dim": V, "rows": rows}


def test_fit_kernel_recovers_known_parameters():
    fit = fit_kernel(kernel_doc({16: 0.8, 64: 0.5, 128: 0.4}, 17.0))
    assert fit["attn_efficiency"] == {16: 0.8, 64: 0.5, 128: 0.4}
    assert fit["attn_fixed_us"] == pytest.approx(17.0, abs=0.01)
    assert (fit["copy_tbps"], fit["bf16_tflops"]) == (4.0, 800.0)


def test_fit_kernel_without_a_latency_floor_pins_it_to_zero():
    doc = kernel_doc({16: 0.4, 128: 0.3}, 0.0)
    for c in doc["cells"]:
        c["time_us"] *= 1.0 if c["batch"] > 1 else 0.5   # small cells faster than the line: negative
                                                         # intercept
    assert fit_kernel(doc)["attn_fixed_us"] == 0.0


def test_fit_kernel_refuses_efficiency_above_one():
    with pytest.raises(UserError, match=r"outside \(0, 1\] at heads \[16\]"):
        fit_kernel(kernel_doc({16: 1.5, 64: 0.5}, 10.0))


def test_fit_exchange_recovers_known_parameters():
    fit = fit_exchange(exchange_doc(15.0, 190.0, 10.0, 400.0))
    assert fit == {"a2a_latency_us": 15.0, "a2a_gbps": 190.0, "coll_latency_us": 10.0, "link_gbps": 400.0}


@pytest.mark.parametrize("doc, msg", [
    ({"rows": []}, "expected a JSON object with a non-empty 'rows' list"),
    ({"dcp": 2, "rows": [{"batch": 1, "bytes_per_rank": 10}]},
     "lacks numeric ['raw_graph_us', 'packed_graph_us']"),
    ({"dcp": 1, **{k: v for k, v in exchange_doc(15, 190, 10, 400).items() if k != "dcp"}},
     "'dcp' >= 2, got 1"),
    ({**exchange_doc(15, 190, 10, 400), "rows": exchange_doc(15, 190, 10, 400)["rows"][:1]},
     "need rows at two or more sizes"),
])
def test_fit_exchange_bad_documents(doc, msg):
    with pytest.raises(UserError) as e:
        fit_exchange(doc, "E.json")
    assert msg in str(e.value) and str(e.value).startswith("E.json") and "\n" not in str(e.value)


def test_fit_kernel_bad_documents():
    with pytest.raises(UserError, match="needs 'calibration' with the measured copy_tbps"):
        fit_kernel({"cells": kernel_doc({16: 0.5}, 1.0)["cells"]})
    with pytest.raises(UserError, match="non-empty 'cells' list"):
        fit_kernel([1, 2])


def test_merge_keeps_existing_keys_and_loads_back(tmp_path):
    f = tmp_path / "cal.yaml"
    f.write_text("calibration: {copy_tbps: 4.2, layer_overhead_us: 180}\nnote: kept\n")
    merge_calibration(f, {**fit_kernel(kernel_doc({16: 0.8, 128: 0.4}, 17.0)),
                          **fit_exchange(exchange_doc(15.0, 190.0, 10.0, 400.0))}, {"kernel": "synthetic"})
    doc = yaml.safe_load(f.read_text())
    assert doc["note"] == "kept" and doc["fitted_from"] == {"kernel": "synthetic"}
    assert doc["calibration"]["layer_overhead_us"] == 180 and doc["calibration"]["copy_tbps"] == 4.0
    k = load_calibration(f, K)
    assert (k.efficiency(16), k.efficiency(128), k.efficiency(64)) == (0.8, 0.4,
                                                                       pytest.approx(0.5333, abs=1e-4))
    assert (k.attn_fixed_s, k.a2a_latency_s, k.coll_latency_s) == pytest.approx((17e-6, 15e-6, 10e-6))
    assert ((k.a2a_bytes_per_s, k.link_bytes_per_s, k.layer_overhead_s)
            == pytest.approx((190e9, 400e9, 180e-6)))


def test_merge_refuses_a_non_mapping_calibration(tmp_path):
    f = tmp_path / "cal.yaml"
    f.write_text("calibration: [1, 2]\n")
    with pytest.raises(UserError, match="'calibration' must be a mapping, not list"):
        merge_calibration(f, {"a2a_gbps": 1.0})


tables = st.dictionaries(st.sampled_from([1, 2, 8, 16, 32, 64, 128, 256]), st.floats(0.01, 1.0), min_size=1)


@settings(max_examples=200, deadline=None)
@given(table=tables, x=st.integers(1, 1024), y=st.integers(1, 1024))
def test_interpolation_is_bounded_and_monotone_between_monotone_points(table, x, y):
    pts = tuple(table.items())
    v = interpolate_log2(pts, x)
    assert min(table.values()) - 1e-12 <= v <= max(table.values()) + 1e-12
    falling = tuple(zip(sorted(table), sorted(table.values(), reverse=True)))  # efficiency falls with heads
    lo, hi = sorted((x, y))
    assert interpolate_log2(falling, lo) >= interpolate_log2(falling, hi) - 1e-12
    for h, e in pts:
        assert interpolate_log2(pts, h) == e


def test_old_scalar_calibration_still_loads(tmp_path):
    f = tmp_path / "old.yaml"
    f.write_text("calibration: {copy_tbps: 4.2013, bf16_tflops: 761.43, attn_efficiency: 0.3749, "
                 "layer_overhead_us: 200.6, a2a_latency_us: 22}\n")
    k = load_calibration(f, K)
    assert k.efficiency(16) == k.efficiency(128) == 0.3749 and k.efficiency_by_heads == ()
    assert k.coll_latency_s == pytest.approx(22e-6) and k.a2a_bytes_per_s is None
    # without a2a_gbps the packed a2a is still one plain collective over the profile's link
    lc = layer_cost(V3, 8, Choice(8, "a2a", True), 4, 8192, "bfloat16", k)
    assert lc.exchange_s == pytest.approx(22e-6 + 4 * 128 * 514 * 2 * 7 / 8 / k.link_bytes_per_s)


def test_table_efficiency_applies_per_kernel_heads(tmp_path):
    f = tmp_path / "cal.yaml"
    f.write_text("calibration: {attn_efficiency: {16: 0.8, 128: 0.4}, attn_fixed_us: 20, a2a_latency_us: 15, "
                 "a2a_gbps: 200}\n")
    k = load_calibration(f, K)
    one = layer_cost(V3, 8, Choice(1, "none", False), 32, 65536, "bfloat16", k)   # 16 kernel heads
    eight = layer_cost(V3, 8, Choice(8, "a2a", True), 32, 65536, "bfloat16", k)   # 128 kernel heads
    assert (one.efficiency, eight.efficiency) == (0.8, 0.4)
    assert one.attention_s == pytest.approx(20e-6 + max(one.kv_read_s + one.q_o_s, one.attn_flops_s) / 0.8)
    assert eight.exchange_s == pytest.approx(15e-6 + 32 * 128 * 514 * 2 / 200e9)


def test_model_roofline_counts_what_bench_kernel_counts():
    # kernel heads H at dcp 1 need attn_tp = 128 / H; bench kernel: bytes = KV + q + o, flops = 2BHctx(R+V)
    k = Constants(4e12, 800e12, 1e11, 0.0, "test")
    for h, b, ctx in [(16, 8, 8192), (64, 1, 131072), (128, 64, 32768)]:
        lc = layer_cost(V3, 128 // h, Choice(1, "none", False), b, ctx, "bfloat16", k)
        assert lc.kv_read_s + lc.q_o_s == pytest.approx((b * ctx * R * 2 + b * h * (R + V) * 2) / 4e12)
        assert lc.attn_flops_s == pytest.approx(2 * b * h * ctx * (R + V) / 800e12)


@pytest.mark.parametrize("text, msg", [
    ("calibration: {attn_efficency: 0.5}\n", "unknown calibration key(s) ['attn_efficency']; valid: ["),
    ("calibration: {attn_efficiency: {16: 0.5, 64: 0}}\n",
     "need 0 < attn_efficiency <= 1, as a number or a mapping"),
    ("calibration: {attn_efficiency: {16.5: 0.5}}\n",
     "mapping of kernel heads (positive integers) to fractions"),
    ("calibration: {attn_efficiency: [0.5]}\n", "need 0 < attn_efficiency <= 1"),
    ("calibration: {a2a_latency_us: -3}\n", "calibration rates must be positive and times must be >= 0"),
    ("calibration: {a2a_gbps: 0}\n", "calibration rates must be positive"),
    ("calibration: {link_gbps: fast}\n", "calibration values must be numbers"),
    ("other: 1\n", "has no 'calibration' mapping"),
])
def test_bad_calibration_is_a_one_line_user_error(tmp_path, text, msg):
    f = tmp_path / "cal.yaml"
    f.write_text(text)
    with pytest.raises(UserError) as e:
        load_calibration(f, K)
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_bad_calibration_exits_2_from_recommend(tmp_path):
    from dcpctl.cli.main import cli
    f = tmp_path / "cal.yaml"
    f.write_text("calibration: {attn_efficiency: {16: 2}}\n")
    r = CliRunner().invoke(cli, ["recommend", "--model-preset", "deepseek-v3.1", "--hardware", "h200-8",
                                 "--context-len", "8192", "--concurrency", "4", "--calibration", str(f)])
    assert r.exit_code == 2 and "need 0 < attn_efficiency <= 1" in r.output
    assert len([line for line in r.output.splitlines() if line.strip()]) == 1


def test_fit_exchange_prefers_the_in_place_rows_when_present():
    doc = exchange_doc(15.0, 190.0, 10.0, 400.0)
    assert fit_exchange(doc)["a2a_latency_us"] == 15.0
    for r in doc["rows"]:
        r["inplace_graph_us"] = 12.0 + r["bytes_per_rank"] / 250e3
    assert fit_exchange(doc)["a2a_latency_us"] == 12.0 and fit_exchange(doc)["a2a_gbps"] == 250.0
    assert fit_exchange(doc, column="packed_graph_us")["a2a_gbps"] == 190.0
