"""The measured backend table (dcpctl.plan.attention_table) from `dcpctl bench kernel` results.

    dcpctl bench kernel --save-table FILE        every cell of the call, each backend's time
    python -m dcpctl.bench.kernel_table IN OUT   the same table from benchmarks/flashinfer_mla.py's JSON
                                                 (how the shipped dcpctl/data/attention/h200.json was made)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from dcpctl.plan.attention_table import BACKENDS

PAGE = 64


def table_from_bench(res: dict[str, Any], command: str) -> dict[str, Any]:
    """A table from `bench kernel`'s result: cells carry `backends: {name: {time_us, ...}}`."""
    cells = [{"heads": c["heads"], "kv_dtype": res["kv_dtype"], "page_size": res.get("page_size", PAGE),
              "device": res["device"], "batch": c["batch"], "ctx": c["ctx"],
              "us": {b: round(r["time_us"], 2) for b, r in c["backends"].items() if r.get("time_us") is not None}}
             for c in res["cells"]]
    return {"source": f"`{command}` on {res['device']}", "record": "dcpctl bench kernel --save-table", "torch": res.get("torch"), "cells": cells}


def table_from_flashinfer_mla(doc: dict[str, Any], name: str) -> dict[str, Any]:
    """A table from benchmarks/flashinfer_mla.py's JSON (ours_us / flashinfer_us per cell, bf16, page 64)."""
    fi = doc["flashinfer"]
    cells = [{"heads": c["heads"], "kv_dtype": "bf16", "page_size": PAGE, "device": doc["device"], "batch": c["batch"],
              "ctx": c["ctx"], "us": {"triton": round(c["ours_us"], 2), "flashinfer": round(c["flashinfer_us"], 2)}}
             for c in doc["cells"] if c.get("flashinfer_us") is not None]
    return {"source": f"{name} ({doc['device']})",
            "record": f"derived from benchmarks/data/{name} (benchmarks/flashinfer_mla.py: ours = the default "
                      f"configs, FlashInfer {fi['version']} backend {sorted(set(fi['backend'].values()))}, FlashInfer's "
                      f"KV read as {fi['layout']}; {fi['timing']}) by `python -m dcpctl.bench.kernel_table "
                      f"benchmarks/data/{name} dcpctl/data/attention/h200.json`",
            "torch": doc.get("torch"), "cells": cells}


def write(table: dict[str, Any], path: Path) -> None:
    unknown = {b for c in table["cells"] for b in c["us"]} - set(BACKENDS)
    if unknown:
        raise ValueError(f"unknown backends {sorted(unknown)}; valid: {list(BACKENDS)}")
    path.write_text(json.dumps(table, indent=1) + "\n")


if __name__ == "__main__":
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    write(table_from_flashinfer_mla(json.loads(src.read_text()), src.name), dst)
