"""Fit the cost model's calibration from recorded `dcpctl bench kernel` / `bench exchange` JSON.

    python -m benchmarks.fit_calibration --kernel K.json [--exchange E.json] -o calibration.yaml

Writes (merging into -o, other keys kept) copy_tbps, bf16_tflops, attn_efficiency {heads: fraction}
and attn_fixed_us from the kernel grid; a2a_latency_us and a2a_gbps (the exchange the decode step
runs: in-place rows when the document has them, else packed), coll_latency_us and link_gbps from
the exchange rows. dcpctl/plan/calibrate.py has the formulas; each fit is printed against its data.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from dcpctl.plan.calibrate import a2a_column, fit_exchange, fit_kernel, merge_calibration
from dcpctl.plan.errors import UserError


def _load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {path} as JSON: {e}") from None


def _kernel_report(doc: dict, fit: dict) -> None:
    eff, fixed = fit["attn_efficiency"], fit["attn_fixed_us"]
    ratios = [(c["time_us"] / (fixed + c["roofline_us"] / eff[c["heads"]]), c) for c in doc["cells"]]
    lo, hi = min(ratios, key=lambda t: t[0]), max(ratios, key=lambda t: t[0])
    cell = lambda c: f"H={c['heads']} ctx={c['ctx']} B={c['batch']}"  # noqa: E731
    print(f"kernel: attn_efficiency {eff}, attn_fixed_us {fixed}; measured / fitted over {len(ratios)} "
          f"cells: min {lo[0]:.2f} ({cell(lo[1])}), median {statistics.median(r for r, _ in ratios):.2f}, "
          f"max {hi[0]:.2f} ({cell(hi[1])})")


def _exchange_report(doc: dict, fit: dict) -> None:
    c, col = doc["dcp"], a2a_column(doc)
    print(f"exchange (dcp {c}, {doc.get('kernel_heads')} kernel heads): a2a ({col}) {fit['a2a_latency_us']} "
          f"us + bytes / {fit['a2a_gbps']} GB/s; plain collective {fit['coll_latency_us']} us + received "
          f"bytes / {fit['link_gbps']} GB/s")
    print(f"| B | send bytes | {col} | fitted | raw_graph_us | fitted |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in doc["rows"]:
        b = r["bytes_per_rank"]
        packed = fit["a2a_latency_us"] + b / (fit["a2a_gbps"] * 1e3)
        raw = fit["coll_latency_us"] + b * (c - 1) / c / (fit["link_gbps"] * 1e3)
        print(f"| {r['batch']} | {b:,} | {r[col]:.1f} | {packed:.1f} | {r['raw_graph_us']:.1f} | {raw:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", type=Path, required=True, help="`dcpctl bench kernel --format json` output")
    ap.add_argument("--exchange", type=Path, help="`dcpctl bench exchange --format json` output")
    ap.add_argument("-o", "--output", type=Path, required=True, help="calibration YAML to write (merged)")
    args = ap.parse_args()
    try:
        kdoc = _load(args.kernel)
        values = fit_kernel(kdoc, str(args.kernel))
        _kernel_report(kdoc, values)
        sources = {"kernel": f"{args.kernel.name} ({kdoc.get('device', '?')}, KV "
                             f"{kdoc.get('kv_dtype', '?')})"}
        if args.exchange:
            edoc = _load(args.exchange)
            fit = fit_exchange(edoc, str(args.exchange))
            _exchange_report(edoc, fit)
            values.update(fit)
            sources["exchange"] = (f"{args.exchange.name} (dcp {edoc['dcp']}, {a2a_column(edoc)} and "
                                   "raw_graph_us)")
        merge_calibration(args.output, values, sources)
    except UserError as e:
        sys.exit(f"error: {e}")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
