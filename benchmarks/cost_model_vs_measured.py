"""The planner's cost model against a measured `dcpctl bench decode` table.

    python benchmarks/cost_model_vs_measured.py [DECODE.json] [KERNEL.json] [-o calibration.yaml]

Calibration comes from measurements the decode table does not contain, plus one cell:
- copy_tbps / bf16_tflops: the ceilings `dcpctl bench decode` measured in the same run;
- attn_efficiency: the median roofline fraction `dcpctl bench kernel` measured for the same kernel
  heads at batch >= 32 (a separate run);
- layer_overhead_us: (measured - modelled) of the smallest cell (B=1, shortest context), per layer.
Every other cell is then a prediction; the script prints measured / predicted per cell.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from dcpctl.bench.decode import SHAPES
from dcpctl.plan.cost import Choice, Constants, layer_cost
from dcpctl.plan.model import spec_from_config
from dcpctl.runtime.tiny import tiny_config

DATA = Path(__file__).parent / "data"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("decode", nargs="?", default=DATA / "h200_decode_dcp1.json", type=Path)
    ap.add_argument("kernel", nargs="?", default=DATA / "h200_kernel.json", type=Path)
    ap.add_argument("-o", "--output", type=Path, help="write the calibration YAML here")
    args = ap.parse_args()
    decode, kernel = json.loads(args.decode.read_text()), json.loads(args.kernel.read_text())
    layers_shape = dict(SHAPES[decode["shape"]])
    m = spec_from_config(tiny_config(**layers_shape), name=decode["shape"])
    layers, heads = m.num_layers, m.num_heads
    eff = statistics.median(c["fraction"] for c in kernel["cells"] if c["heads"] == heads and c["batch"] >= 32)
    cal = decode["rows"][0]["calibration"]
    base = Constants(cal["copy_tbps"] * 1e12, cal["bf16_tflops"] * 1e12, 1e11, 0.0, "measured", eff, 0.0)
    rows = sorted(decode["rows"], key=lambda r: (r["batch"], r["context"]))
    mlp = {r["batch"]: r["pred_mlp_ms"] / layers for r in rows}  # the bench's own dense-MLP roofline term

    def predict(r: dict, k: Constants) -> float:
        lc = layer_cost(m, 1, Choice(1, "none", False), r["batch"], r["context"], "bfloat16", k)
        return (lc.layer_s * 1e3 + mlp[r["batch"]]) * layers

    first = rows[0]
    overhead_ms = (first["graph_ms"] - predict(first, base)) / layers
    k = Constants(base.hbm_bytes_per_s, base.flops_per_s, base.link_bytes_per_s, 0.0, "calibrated", eff,
                  overhead_ms * 1e-3)
    print(f"attn_efficiency {eff:.3f} (bench kernel, {heads} heads, B>=32), layer_overhead_us "
          f"{overhead_ms * 1e3:.0f} (cell B={first['batch']}, L={first['context']})")
    print("| B | context | measured graph ms | uncalibrated prediction | calibrated prediction | measured / calibrated |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        p1 = predict(r, k)
        print(f"| {r['batch']} | {r['context']} | {r['graph_ms']:.3f} | {r['predicted_ms']:.3f} | {p1:.3f} | "
              f"{r['graph_ms'] / p1:.2f} |")
    if args.output:
        args.output.write_text(f"calibration: {{copy_tbps: {cal['copy_tbps']:.4f}, bf16_tflops: {cal['bf16_tflops']:.2f}, "
                       f"attn_efficiency: {eff:.4f}, layer_overhead_us: {overhead_ms * 1e3:.1f}}}\n")


if __name__ == "__main__":
    main()
