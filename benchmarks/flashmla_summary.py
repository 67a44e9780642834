"""Summarize benchmarks/gpu_flashmla.sh's `bench kernel` results: the automatic choice against the best per cell.

    python3 benchmarks/flashmla_summary.py DIR     (DIR holds kernel_*.json and table_*.json from that script)

Writes DIR/table_all.json (every cell of the run as one backend table, the shape of dcpctl/tuning/attention/device_name=NVIDIA_H200.json
has, ready to replace it) and DIR/summary.json; prints one row per cell: each backend's time, the pick of the shipped table and of
this run's table with how much slower than the best it is, each backend's roofline fraction (burst bf16 ceiling;
and against the sustained one, bench/ceilings.py), and whether the cell is one of issue 18's target cells
(B x ctx >= 512K tokens, ctx 8K-128K).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from dcpctl.plan.attention_table import BACKENDS, Key, decide, load_table, table_for

BIG = 512 * 1024


def main(out: Path) -> None:
    runs = [json.loads(p.read_text()) for p in sorted(out.glob("kernel_*.json")) if p.stat().st_size]
    cells = [c for r in runs for c in r["cells"]]
    parts = [json.loads(p.read_text()) for p in sorted(out.glob("table_h*.json"))]
    table = {**parts[0], "data": {"cells": [c for p in parts for c in p["data"]["cells"]]},
             "command": " + ".join(p["command"] for p in parts)}
    (out / "table_all.json").write_text(json.dumps(table, indent=1) + "\n")
    tables = {"shipped": table_for(table["device"], table["sm"]), "this run": load_table(out / "table_all.json")}
    avail = {b: None if any(b in r["backends"] for r in runs) else "not timed" for b in BACKENDS}
    rows, worst = [], {}
    for c in cells:
        us = {b: v["time_us"] for b, v in c["backends"].items() if v.get("time_us")}
        best = min(us.values())
        row = {"heads": c["heads"], "ctx": c["ctx"], "batch": c["batch"], "us": {b: round(t, 1) for b, t in us.items()},
               "best": min(us, key=us.get), "fraction": {b: round(v["fraction"], 3) for b, v in c["backends"].items()
                                                         if v.get("fraction")},
               "fraction_sustained": {b: round(v["fraction_sustained"], 3) for b, v in c["backends"].items()
                                      if v.get("fraction_sustained")},   # empty in results before the ninth session
               "big": c["batch"] * c["ctx"] >= BIG and c["ctx"] >= 8192}
        for name, t in tables.items():
            pick = decide(Key(c["heads"], "bf16", 64, runs[0]["device"]), "auto", avail, t).pick(c["batch"], c["ctx"])
            slow = us[pick] / best - 1 if pick in us else None
            row[name] = {"pick": pick, "over_best": None if slow is None else round(slow, 4)}
            worst[name] = max(worst.get(name, 0.0), slow if slow is not None else float("inf"))
        rows.append(row)
    print("heads ctx batch | us per backend | shipped pick (over best) | this-run pick (over best) | fractions "
          "(burst) | fractions (sustained) | target cell")
    for r in rows:
        print(r["heads"], r["ctx"], r["batch"], r["us"], *[f"{r[n]['pick']} ({r[n]['over_best']})" for n in tables],
              r["fraction"], r["fraction_sustained"], r["big"])
    print("worst auto over best:", {k: f"{v:.1%}" for k, v in worst.items()})
    per_head = {}
    for h in sorted({r["heads"] for r in rows}):
        big = [r for r in rows if r["heads"] == h and r["big"]]
        per_head[h] = {b: min((r["fraction"].get(b, 0.0) for r in big), default=None) for b in ["best", *BACKENDS]
                       if b == "best" or any(b in r["fraction"] for r in big)}
        per_head[h]["best"] = min((max(r["fraction"].values()) for r in big), default=None)
        sus = [max(r["fraction_sustained"].values()) for r in big if r["fraction_sustained"]]
        per_head[h]["best_sustained"] = min(sus) if sus and len(sus) == len(big) else None
        print(f"heads {h}: min roofline fraction over the {len(big)} cells with B x ctx >= 512K, ctx >= 8K: "
              f"{per_head[h]}")
    (out / "summary.json").write_text(json.dumps({"rows": rows, "worst_auto_over_best": worst,
                                                  "min_fraction_big_cells": per_head}, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
