"""Sweep the head_bmm kernel's settings (BLOCK_N, BLOCK_K, warps, stages) for decode's two absorbed-MLA
products.

The V3 shapes (128 heads): q_nope [M, 128, 128] @ w_kc [128, 128, 512] into the [M, 128, 576] query buffer,
and o [M, 128, 512] @ w_vc [128, 512, 128] into the o_proj input, in the strided views the model passes. Each
setting is timed as 30 calls captured in one CUDA graph over weight copies larger than L2 (as step_gemms.py),
next to the shipped default, torch.bmm and the copy roofline (16.8 MB per product at --copy-tbps). Prints the
best per shape and M; JSON to -o. --save-table FILE writes the head_bmm tuning table the sweep makes
(`table`): per product, the (BLOCK_K, warps, stages) whose best BLOCK_N per row class sums to the least time
over the swept batches, with that BLOCK_N for one row (and rows past 32) and for 2-32 rows; the product with
the smaller K answers K up to it, the other every K.

usage: python3 -m benchmarks.head_bmm_sweep [--batches 1,8,32] [-o out.json] [--save-table FILE]
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import torch

from benchmarks.step_gemms import _time
from dcpctl import tuning
from dcpctl.runtime.kernels.head_bmm_triton import default_config, head_bmm

H, NOPE, L, V, QW = 128, 128, 512, 128, 576
ROTATE = 8   # 8 x 16.8 MB > the H200's 50 MB L2


def operands(name: str, m: int):
    dev, dt = "cuda", torch.bfloat16
    if name == "w_kc":   # x: q_nope [M, H, 128] viewed [H, M, 128]; out: the query buffer's first 512 of 576
        x = torch.randn(m, H, NOPE, device=dev, dtype=dt).transpose(0, 1)
        ws = [torch.randn(H, NOPE, L, device=dev, dtype=dt) * 0.05 for _ in range(ROTATE)]
        out = torch.empty(m, H, QW, device=dev, dtype=dt)[:, :, :L].transpose(0, 1)
    else:                # x: o [M, H, 512] viewed [H, M, 512]; out: [M, H, 128] viewed [H, M, 128]
        x = torch.randn(m, H, L, device=dev, dtype=dt).transpose(0, 1)
        ws = [torch.randn(H, L, V, device=dev, dtype=dt) * 0.05 for _ in range(ROTATE)]
        out = torch.empty(m, H, V, device=dev, dtype=dt).transpose(0, 1)
    return x, ws, out


def _row_class(m: int) -> str:
    return "bn_2_32_rows" if 1 < m <= 32 else "bn"     # as head_bmm_triton.default_config reads the table


def _picks(by_class: dict[str, dict[int, dict[int, float]]], ms: set[int]) -> tuple[float,
                                                                                    dict[str, int]] | None:
    """(summed us, BLOCK_N per row class) of one (BLOCK_K, warps, stages), None when it missed a swept M."""
    total, picks = 0.0, {}
    for cls in {_row_class(m) for m in ms}:
        need = {m for m in ms if _row_class(m) == cls}
        full = {bn: sum(per.values()) for bn, per in by_class.get(cls, {}).items() if set(per) == need}
        if not full:
            return None
        picks[cls] = min(full, key=full.get)
        total += full[picks[cls]]
    return total, picks


def _product_rule(rows: list[dict]) -> dict:
    """One product's table entry from its rows (one per M): the setting of least summed time."""
    times: dict[tuple, dict[str, dict[int, dict[int, float]]]] = {}   # (bk, warps, stages) -> class -> bn ->
                                                                      # M
    for r in rows:
        for t in r["timed"]:
            bn, bk, warps, stages = t["config"]
            per = times.setdefault((bk, warps, stages), {}).setdefault(_row_class(r["M"]), {})
            per.setdefault(bn, {})[r["M"]] = t["us"]
    ms = {r["M"] for r in rows}
    scored = [(got, key) for key, by_class in times.items() if (got := _picks(by_class, ms)) is not None]
    if not scored:
        raise SystemExit("no (BLOCK_K, warps, stages) setting ran at every swept batch")
    (_, picks), (bk, warps, stages) = min(scored, key=lambda g: g[0][0])
    bn = picks.get("bn", picks.get("bn_2_32_rows"))
    rule = {"bn": bn, "bk": bk, "warps": warps, "stages": stages}
    if picks.get("bn_2_32_rows", bn) != bn:
        rule["bn_2_32_rows"] = picks["bn_2_32_rows"]
    return rule


def table(rows: list[dict]) -> dict:
    """The head_bmm tuning table ({"by_max_k": [[K, rule], [None, rule]]}) from the sweep's rows."""
    by_k: dict[int, list[dict]] = {}
    for r in rows:
        by_k.setdefault(r["K"], []).append(r)
    ks = sorted(by_k)
    return {"by_max_k": [[k if k != ks[-1] else None, _product_rule(by_k[k])] for k in ks]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--copy-tbps", type=float, default=4.2)
    ap.add_argument("-o", "--out")
    ap.add_argument("--save-table",
                    help="write the head_bmm tuning table the sweep makes (dcpctl/tuning/head_bmm)")
    a = ap.parse_args()
    grid = list(itertools.product((64, 128, 256), (32, 64, 128), (4, 8), (2, 3, 4)))
    rows = []
    for name, m in itertools.product(("w_kc", "w_vc"), [int(b) for b in a.batches.split(",")]):
        x, ws, out = operands(name, m)
        k, n = ws[0].shape[1], ws[0].shape[2]
        ref = torch.bmm(x, ws[0])
        roof = ws[0].numel() * 2 / (a.copy_tbps * 1e12) * 1e6
        bmm_us = _time(lambda i: torch.bmm(x, ws[i % ROTATE], out=out), ROTATE)
        timed = []
        for cfg in grid:
            bn, bk = cfg[0], cfg[1]
            if bn > n or bk > k:
                continue
            try:
                head_bmm(x, ws[0], out, cfg)
                err = ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
                us = _time(lambda i, c=cfg: head_bmm(x, ws[i % ROTATE], out, c), ROTATE)
            except Exception as e:  # a setting the compiler refuses (shared memory): skip it, say so
                print(f"{name} M={m} {cfg}: {type(e).__name__}", flush=True)
                continue
            if err > 1e-2:   # bf16 output rounding is ~4e-3 of the largest: more is a wrong setting, never a
                             # best
                print(f"{name} M={m} {cfg}: wrong result ({err:.1e} relative)", flush=True)
                continue
            timed.append({"config": cfg, "us": us, "err": err})
        timed.sort(key=lambda t: t["us"])
        d = default_config(m, k, n, torch.device("cuda", torch.cuda.current_device()))
        d_us = next((t["us"] for t in timed if tuple(t["config"]) == d), float("nan"))   # nan: it failed
        best = timed[0]
        print(f"{name} M={m:3}: default {d} {d_us:.2f} us, best {best['config']} {best['us']:.2f} us "
              f"(err {best['err']:.1e}), torch.bmm {bmm_us:.2f} us, roofline {roof:.2f} us; next: "
              + ", ".join(f"{t['config']} {t['us']:.2f}" for t in timed[1:6]), flush=True)
        rows.append({"product": name, "M": m, "K": k, "N": n, "default": d, "default_us": d_us,
                     "bmm_us": bmm_us, "roofline_us": roof, "timed": timed})
    if a.out:
        Path(a.out).write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    if a.save_table:
        major, minor = torch.cuda.get_device_capability()
        tuning.write(a.save_table, "head_bmm", torch.cuda.get_device_name(), major * 10 + minor,
                     "python -m benchmarks.head_bmm_sweep " + " ".join(sys.argv[1:]), tuning.source_commit(),
                     table(rows))


if __name__ == "__main__":
    main()
