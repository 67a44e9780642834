"""The checks of `dcpctl bench rank` files (benchmarks/gpu.sh rank writes them): each file's targets, one line
each.

    python3 -m benchmarks.rank_check FILE.json [FILE.json ...]

Per file: weights loaded against the plan's (target: within 1%); memory at the plan's max_concurrency (fits or
not); the host gap; the served engine's graph step against this bench's at the same batch and context, the
router's own routing (target: within 3%; meaningful where both ran the same weights, `--weights checkpoint`);
then every cell's compute (and the stand-in copies' share of the step).  Exit 1 when a target is missed.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def check(path: Path) -> bool:
    doc = json.loads(path.read_text())
    p, w, m = doc["plan"], doc["weights"], doc["memory"]
    ok = True
    print(f"== {path.name}: {doc['command']}")
    print(f"   {doc['device']['name']}, commit {doc['commit']}, rank {p['rank']}, {p['layers_run']} of "
          f"{p['num_layers']} layers, attention "
          f"{p['attention_backend']}{' (PARTIAL)' if doc.get('partial') else ''}")
    err = w["loaded_bytes"] / w["plan_bytes"] - 1
    ok &= abs(err) <= 0.01
    print(f"   weights {w['loaded_bytes'] / 2**30:.2f} GiB loaded, {w['plan_bytes'] / 2**30:.2f} GiB "
          f"planned: {err * 100:+.2f}% (target 1%: {'ok' if abs(err) <= 0.01 else 'MISSED'})")
    print(f"   memory at {m['max_concurrency']} x {m['context']}: peak {m['peak_bytes'] / 2**30:.1f} GiB of "
          f"{m['memory_per_rank_bytes'] / 2**30:.1f} GiB, {'fits' if m['fits'] else 'DOES NOT FIT'}"
          f"{'' if m['peak_measured'] else ' (computed)'}{'; ' + m['error'] if m.get('error') else ''}")
    s = doc.get("served") or {}
    if s.get("bench_step_us"):
        r = s["served_step_us"] / s["bench_step_us"]
        ok &= abs(r - 1) <= 0.03
        print(f"   served step {s['served_step_us'] / 1e3:.3f} ms, bench step {s['bench_step_us'] / 1e3:.3f} "
              f"ms at {s['batch']} x {s['context']}: served / bench {r:.3f} (target 3%: "
              f"{'ok' if abs(r - 1) <= 0.03 else 'MISSED'}); host gap {doc['host_gap_us']:.1f} us")
    for c in doc["cells"]:
        share = c["standin_us"] / c["step_us"] if c["step_us"] else 0
        print(f"   {c['batch']:>4} x {c['context']:>7} {c['routing']:<8} step {c['step_us'] / 1e3:8.3f} ms  "
              f"compute {c['compute_us'] / 1e3:8.3f} ms  full {c['compute_us_full'] / 1e3:8.3f} ms  stand-in "
              f"{share * 100:4.1f}%  spread {c['spread']:.3f}  expert rows {c.get('expert_rows', '-')}")
    for c in doc.get("skipped", []):
        print(f"   {c['batch']:>4} x {c['context']:>7} skipped: {c['reason']}")
    return ok


if __name__ == "__main__":
    results = [check(Path(a)) for a in sys.argv[1:] if Path(a).exists()]
    sys.exit(0 if results and all(results) else 1)
