"""Fit the cost model's measured terms from `dcpctl bench` JSON documents; merge them into a file.

    fit_kernel(doc)   `bench kernel --format json` -> copy_tbps, bf16_tflops (the ceilings its
                      fractions are relative to), attn_efficiency {heads: fraction}, attn_fixed_us
    fit_exchange(doc) `bench exchange --format json` -> a2a_latency_us, a2a_gbps (the a2a exchange the
                      decode step runs, in a CUDA graph, per send-buffer byte: a2a_column picks the
                      in-place rows when the document has them, else the packed ones), coll_latency_us,
                      link_gbps (the raw all_to_all_single in a graph, per byte a rank receives:
                      (c-1)/c of its buffer)
    merge_calibration(path, values, sources)  update the file's `calibration:` (and `fitted_from:`)
                      mappings, keeping every other key

Both fits are weighted least squares on relative error (weights 1/t^2), so the small, latency-bound
cells count as much as the large ones:

    kernel:    time_us = attn_fixed_us + roofline_us / efficiency[heads]     (one fixed, one slope per H)
    exchange:  time_us = latency_us + bytes / (gbps * 1e3)
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from dcpctl.plan.errors import UserError


def _solve(rows: list[list[float]], y: list[float]) -> list[float]:
    # min sum_i ((rows[i] . x - y_i) / y_i)^2 through the normal equations (a handful of unknowns)
    n = len(rows[0])
    a = [[sum(r[i] * r[j] / t ** 2 for r, t in zip(rows, y)) for j in range(n)] for i in range(n)]
    b = [sum(r[i] / t for r, t in zip(rows, y)) for i in range(n)]
    for i in range(n):
        p = max(range(i, n), key=lambda r: abs(a[r][i]))
        a[i], a[p], b[i], b[p] = a[p], a[i], b[p], b[i]
        if abs(a[i][i]) < 1e-300:
            raise UserError("the benchmark document does not determine the fit (too few distinct cells)")
        for r in range(n):
            if r != i:
                f = a[r][i] / a[i][i]
                a[r] = [x - f * z for x, z in zip(a[r], a[i])]
                b[r] -= f * b[i]
    return [b[i] / a[i][i] for i in range(n)]


def _line(xs: list[float], ys: list[float], what: str) -> tuple[float, float]:
    """(intercept >= 0, slope > 0) of ys against xs; the intercept is pinned to 0 if the fit goes negative."""
    if len(set(xs)) < 2:
        raise UserError(f"{what}: need rows at two or more sizes to fit latency and bandwidth, got "
                        f"{len(set(xs))}")
    icpt, slope = _solve([[1.0, x] for x in xs], ys)
    if icpt < 0:
        icpt, slope = 0.0, _solve([[x] for x in xs], ys)[0]
    if slope <= 0:
        raise UserError(f"{what}: time does not grow with bytes (slope {slope:.3g} us/byte); cannot fit a "
                        "bandwidth")
    return icpt, slope


def _rows(doc: Any, key: str, need: tuple[str, ...], what: str) -> list[dict[str, Any]]:
    rows = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(rows, list) or not rows:
        raise UserError(f"{what}: expected a JSON object with a non-empty '{key}' list")
    for r in rows:
        missing = [n for n in need if not isinstance(r, dict) or not isinstance(r.get(n), (int, float))]
        if missing:
            raise UserError(f"{what}: a '{key}' entry lacks numeric {missing}: {str(r)[:120]}")
        if any(r[n] <= 0 for n in need):
            raise UserError(f"{what}: a '{key}' entry has a value <= 0 in {list(need)}: {str(r)[:120]}")
    return rows


def fit_kernel(doc: Any, what: str = "bench kernel document") -> dict[str, Any]:
    """Ceilings, per-head efficiency table and per-call fixed time from `bench kernel --format json`."""
    cells = _rows(doc, "cells", ("heads", "roofline_us", "time_us"), what)
    cal = doc.get("calibration") or {}
    if not all(isinstance(cal.get(k), (int, float)) and cal[k] > 0 for k in ("copy_tbps", "bf16_tflops")):
        raise UserError(f"{what}: needs 'calibration' with the measured copy_tbps and bf16_tflops")
    heads = sorted({int(c["heads"]) for c in cells})
    rows = [[1.0] + [c["roofline_us"] if c["heads"] == h else 0.0 for h in heads] for c in cells]
    y = [c["time_us"] for c in cells]
    x = _solve(rows, y)
    if x[0] < 0:                                   # no latency floor in the data: slopes alone
        x = [0.0] + _solve([r[1:] for r in rows], y)
    eff = {h: 1 / s if s > 0 else float("inf") for h, s in zip(heads, x[1:])}
    over = {h: e for h, e in eff.items() if not 0 < e <= 1}
    if over:
        raise UserError(f"{what}: fitted efficiency outside (0, 1] at heads {sorted(over)}: the kernel beats "
                        f"the roofline of the recorded ceilings, so they are not this kernel's machine")
    return {"copy_tbps": float(cal["copy_tbps"]), "bf16_tflops": float(cal["bf16_tflops"]),
            "attn_efficiency": {h: round(e, 4) for h, e in eff.items()}, "attn_fixed_us": round(x[0], 2)}


def a2a_column(doc: Any) -> str:
    """The exchange the decode step runs: `inplace_graph_us` (the kernel writes the send buffer) when
    every row has it, else `packed_graph_us` (pack + all-to-all + merge; documents before in-place)."""
    rows = doc.get("rows") if isinstance(doc, dict) else None
    inplace = isinstance(rows, list) and rows and all(isinstance(r, dict) and "inplace_graph_us" in r
                                                      for r in rows)
    return "inplace_graph_us" if inplace else "packed_graph_us"


def fit_exchange(doc: Any, what: str = "bench exchange document",
                 column: str | None = None) -> dict[str, Any]:
    """a2a exchange (`column`, default a2a_column(doc)) and plain-collective latency and bandwidth
    from `bench exchange --format json`."""
    col = column or a2a_column(doc)
    rows = _rows(doc, "rows", ("bytes_per_rank", "raw_graph_us", col), what)
    c = doc.get("dcp")
    if not isinstance(c, int) or c < 2:
        raise UserError(f"{what}: needs the DCP size 'dcp' >= 2, got {c!r}")
    send = [float(r["bytes_per_rank"]) for r in rows]
    a2a_lat, a2a_slope = _line(send, [r[col] for r in rows], f"{what} ({col})")
    lat, slope = _line([b * (c - 1) / c for b in send], [r["raw_graph_us"] for r in rows],
                       f"{what} (raw_graph_us)")
    gbps = lambda us_per_byte: round(1e-3 / us_per_byte, 1)  # noqa: E731  bytes/us -> GB/s
    return {"a2a_latency_us": round(a2a_lat, 2), "a2a_gbps": gbps(a2a_slope),
            "coll_latency_us": round(lat, 2), "link_gbps": gbps(slope)}


def merge_calibration(path: Path, values: dict[str, Any],
                      sources: dict[str, str] | None = None) -> dict[str, Any]:
    """Write `values` into path's `calibration:` mapping (created if missing) and `sources` (where each
    came from) into its `fitted_from:` mapping; other keys are kept. Returns the whole document."""
    import yaml

    from dcpctl.plan.yamlio import read_yaml
    doc: dict[str, Any] = read_yaml(path) if path.exists() else {}
    cal = doc.get("calibration", {})
    if not isinstance(cal, dict):
        raise UserError(f"{path}: 'calibration' must be a mapping, not {type(cal).__name__}")
    doc["calibration"] = {**cal, **values}
    if sources:
        prov = doc.get("fitted_from")
        doc["fitted_from"] = {**(prov if isinstance(prov, dict) else {}), **sources}
    try:
        path.write_text(yaml.safe_dump(doc, sort_keys=False, width=200))
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None
    return doc
