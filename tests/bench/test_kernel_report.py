"""bench kernel's report on made-up results (no GPU): the sustained-ceiling fraction is printed for the
fastest backend."""
from dcpctl.bench import kernel


def _cell(heads, ctx, batch, us):   # us: {backend: time}; roofline 100 us (burst) and 120 us (sustained)
    return {"heads": heads, "ctx": ctx, "batch": batch, "roofline_us": 100.0, "roofline_sustained_us": 120.0,
            "bound": "compute", "best": min(us, key=us.get), "auto": "triton", "auto_over_best": 0.0,
            "backends": {b: {"time_us": t, "fraction": 100.0 / t, "fraction_sustained": 120.0 / t}
                         for b, t in us.items()}}


def _res(cells):
    return {"device": "NVIDIA H200", "kv_dtype": "bf16", "torch": "t", "calibration": {"copy_tbps": 4.2,
            "bf16_tflops": 790.0}, "bf16_sustained_tflops": 670.0, "cells": cells, "fraction_min": 0.11,
            "fraction_median": 0.22, "backends": ["triton",
                                                  "flashmla"], "flashinfer": "-", "flashmla": "built",
            "exchange": "-"}


def test_report_prints_the_sustained_fraction_of_the_fastest(capsys):
    kernel._table(_res([_cell(128, 131072, 32, {"triton": 200.0, "flashmla": 150.0})]))
    out = capsys.readouterr().out
    assert "sustained 670.0" in out and "0.80" in out      # 120 / 150: the fastest's sustained fraction
    assert "0.67" in out and "0.50" in out                 # burst fractions: flashmla 100/150, ours 100/200
    assert "0.60" not in out                               # ours' sustained fraction (120/200) is not shown
