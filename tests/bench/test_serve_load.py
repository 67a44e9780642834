"""`dcpctl bench serve`'s workload and metrics (bench/serve_load.py): seeded Poisson arrivals, length ranges,
vLLM's metric names and numpy's percentiles."""
import math
import random

import pytest

from dcpctl.bench.serve_load import Item, Sample, lengths, metrics, percentile, workload


def test_poisson_arrivals_are_seeded_and_have_the_rate():
    a = workload(2000, 16, 8, 0.0, 4.0, seed=3, vocab=50)
    assert a == workload(2000, 16, 8, 0.0, 4.0, seed=3, vocab=50) != workload(2000, 16, 8, 0.0, 4.0, 4, 50)
    gaps = [y.at - x.at for x, y in zip(a, a[1:])]
    assert a[0].at == 0.0 and min(gaps) >= 0
    assert sum(gaps) / len(gaps) == pytest.approx(1 / 4.0, rel=0.08)      # exponential gaps of mean 1 / rate
    assert all(it.at == 0.0 for it in workload(10, 16, 8, 0.0, math.inf, 0, 50))


def test_lengths_span_the_range_and_background_comes_first():
    got = lengths(random.Random(1), 4000, 100, 0.5)
    assert min(got) == 50 and max(got) == 150
    items = workload(3, 10, 5, 0.0, 2.0, 0, 50, background=2, bg_input=4, bg_output=99)
    assert [it.cls for it in items] == ["background"] * 2 + ["arrival"] * 3
    assert [len(it.prompt) for it in items] == [4, 4, 10, 10, 10] and items[0].max_tokens == 99


def test_percentile_is_numpys_linear_rule():
    np = pytest.importorskip("numpy")
    xs = [random.Random(2).random() for _ in range(37)]
    for q in (0, 1, 50, 90, 99, 100):
        assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))


def test_metrics_use_vllms_names_and_definitions():
    items = [Item("arrival", [1] * 10, 4, 0.0), Item("arrival", [1] * 20, 4, 0.0),
             Item("arrival", [1], 4, 0.0)]
    samples = [Sample(True, 0.1, [0.01, 0.02, 0.03], 0.16, 4), Sample(True, 0.2, [0.05] * 3, 0.35, 4),
               Sample(False, error="HTTP 503")]
    m = metrics(items, samples, 2.0)
    assert (m["completed"], m["failed"], m["total_input_tokens"], m["total_output_tokens"]) == (2, 1, 30, 8)
    assert (m["request_throughput"] == 1.0 and m["output_throughput"] == 4.0
            and m["total_token_throughput"] == 19.0)
    assert m["mean_ttft_ms"] == pytest.approx(150.0) and m["median_ttft_ms"] == pytest.approx(150.0)
    assert m["mean_tpot_ms"] == pytest.approx((20.0 + 50.0) / 2)           # (e2e - ttft) / (tokens - 1)
    assert m["p99_itl_ms"] == pytest.approx(percentile([10, 20, 30, 50, 50, 50], 99))
    assert m["mean_e2el_ms"] == pytest.approx(255.0)
