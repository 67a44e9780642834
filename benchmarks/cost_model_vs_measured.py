"""The planner's cost model against measured `dcpctl bench decode` tables (CUDA-graph step times).

    python -m benchmarks.cost_model_vs_measured [--calibration CAL.yaml] [--one-gpu D1.json]
        [--two-gpu D2.json] [--repeat D2b.json] [-o CAL.yaml]

The calibration (benchmarks/fit_calibration.py: ceilings, per-head kernel efficiency, per-call
kernel time, exchange latency and bandwidth) comes from `bench kernel` and `bench exchange` runs.
The one term those runs cannot see, layer_overhead_us (norms, rope, cache write, small kernels), is
(measured - modelled) / layers of the smallest cell (B=1, shortest context) of the one-GPU DCP 1
table; -o merges it into the calibration file. Every other cell of both tables is a prediction.

Predicted step = layers * (plan/cost.py layer_cost + dense_mlp_s), with the decode table's own shape
(`bench decode --shape`), TP size, backend and Q replication. The two-GPU table is also compared as
the DCP2/DCP1 step ratio per (B, context). --repeat, a second recording of the same two-GPU grid,
prints how much its DCP 1 cells (no exchange, the same code) moved between runs: the noise floor.
"""
from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from pathlib import Path

from dcpctl.bench.decode import SHAPES
from dcpctl.plan.calibrate import merge_calibration
from dcpctl.plan.cost import Choice, Constants, dense_mlp_s, layer_cost, load_calibration
from dcpctl.plan.model import spec_from_config
from dcpctl.runtime.tiny import tiny_config

DATA = Path(__file__).parent / "data"
TARGET = 1.3


class Table:
    """One `bench decode -o` document and the model of what it ran."""

    def __init__(self, path: Path) -> None:
        self.doc = json.loads(path.read_text())
        a, shape = self.doc["args"], dict(SHAPES[self.doc["shape"]])
        self.m = spec_from_config(tiny_config(**shape), name=self.doc["shape"])
        self.tp, self.inter, self.layers = a["tp"], shape["intermediate_size"], self.m.num_layers
        self.backend, self.repq = a["backend"], a["replicate_q"]
        self.rows = sorted(self.doc["rows"], key=lambda r: (r["dcp"], r["batch"], r["context"]))

    def predict_ms(self, r: dict, k: Constants) -> float:
        ch = Choice(r["dcp"], self.backend if r["dcp"] > 1 else "none", self.repq and r["dcp"] > 1)
        lc = layer_cost(self.m, self.tp, ch, r["batch"], r["context"], "bfloat16", k)
        return (lc.layer_s + dense_mlp_s(self.m.hidden_size, self.inter, self.tp, r["batch"],
                                         k)) * self.layers * 1e3

    def cells(self) -> dict[tuple[int, int, int], dict]:
        return {(r["dcp"], r["batch"], r["context"]): r for r in self.rows}


def measured(r: dict) -> float:
    return r.get("graph_ms", r["step_ms"])


def summary(name: str, ratios: dict[str, float]) -> None:
    vals = sorted(ratios.values())
    bad = [f"{c} ({v:.2f})" for c, v in ratios.items() if not 1 / TARGET <= v <= TARGET]
    print(f"\n{name}: min {vals[0]:.2f}, median {statistics.median(vals):.2f}, max {vals[-1]:.2f}; "
          f"outside {1 / TARGET:.2f}-{TARGET}x: {', '.join(bad) or 'none'}")


def absolute(t: Table, k: Constants, title: str) -> dict[str, float]:
    print(f"\n{title}\n| DCP | B | context | measured graph ms | roofline-only (bench) ms | predicted ms | "
          "measured / predicted |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    out = {}
    for r in t.rows:
        p = t.predict_ms(r, k)
        out[f"DCP{r['dcp']} B={r['batch']} L={r['context']}"] = measured(r) / p
        print(f"| {r['dcp']} | {r['batch']} | {r['context']} | {measured(r):.3f} | "
              f"{r.get('predicted_ms', 0):.3f} | {p:.3f} | {measured(r) / p:.2f} |")
    return out


def step_ratio(t: Table, k: Constants) -> dict[str, float]:
    cells = t.cells()
    print("\nDCP2/DCP1 step ratio\n| B | context | measured | roofline-only (bench) | measured / "
          "roofline-only | predicted | measured / predicted |\n| ---: | ---: | ---: | ---: | ---: | ---: | "
          "---: |")
    out = {}
    for (c, b, L), r in cells.items():
        one = cells.get((1, b, L))
        if c == 1 or one is None:
            continue
        meas, pred = measured(r) / measured(one), t.predict_ms(r, k) / t.predict_ms(one, k)
        roof = r.get("predicted_ms", float("nan")) / one.get("predicted_ms", float("nan"))
        out[f"B={b} L={L}"] = meas / pred
        print(f"| {b} | {L} | {meas:.3f} | {roof:.3f} | {meas / roof:.2f} | {pred:.3f} | {meas / pred:.2f} |")
    return out


def repeat(t: Table, other: Table) -> None:
    a, b = t.cells(), other.cells()
    moved = {key: measured(b[key]) / measured(a[key]) for key in a if key[0] == 1 and key in b}
    if moved:
        print(f"\nrun-to-run: DCP 1 graph ms of the repeat / this table over {len(moved)} cells: "
              f"min {min(moved.values()):.2f}, max {max(moved.values()):.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibration", type=Path, default=DATA / "calibration_h200x2.yaml")
    ap.add_argument("--one-gpu", type=Path, default=DATA / "decode_dcp1_h200.json")
    ap.add_argument("--two-gpu", type=Path, default=DATA / "decode_dcp1_vs_dcp2_h200x2.json")
    ap.add_argument("--repeat", type=Path, help="another recording of the two-GPU grid (noise floor)")
    ap.add_argument("-o", "--output", type=Path,
                    help="merge the fitted layer_overhead_us into this calibration")
    args = ap.parse_args()
    base = Constants(1e12, 1e12, 1e11, 0.0, "unused: the calibration sets every term")
    k = replace(load_calibration(args.calibration, base), layer_overhead_s=0.0)
    one, two = Table(args.one_gpu), Table(args.two_gpu)
    first = one.rows[0]
    overhead = (measured(first) - one.predict_ms(first, k)) / one.layers * 1e-3
    k = replace(k, layer_overhead_s=overhead)
    print(f"calibration {args.calibration.name}; layer_overhead_us {overhead * 1e6:.1f} from "
          f"{args.one_gpu.name} cell B={first['batch']} L={first['context']} (DCP {first['dcp']}, TP "
          f"{one.tp})")
    summary("one GPU, measured / predicted", absolute(one, k, f"{args.one_gpu.name} (TP {one.tp})"))
    cells = absolute(two, k, f"{args.two_gpu.name} (TP {two.tp}, {two.backend})")
    ratios = step_ratio(two, k)
    summary("two GPUs, measured / predicted step", cells)
    summary("two GPUs, measured / predicted DCP2/DCP1 ratio", ratios)
    if args.repeat:
        repeat(two, Table(args.repeat))
    if args.output:
        merge_calibration(args.output, {"layer_overhead_us": round(overhead * 1e6, 1)},
                          {"layer_overhead_us": f"{args.one_gpu.name} cell B={first['batch']} "
                                                f"L={first['context']}"})
        print(f"\nwrote layer_overhead_us to {args.output}")


if __name__ == "__main__":
    main()
