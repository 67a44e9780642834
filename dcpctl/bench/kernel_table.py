"""The measured backend table (dcpctl.plan.attention_table) from `dcpctl bench kernel` results.

    dcpctl bench kernel --save-table FILE        every cell of the call, each backend's time, as an attention
                                                 tuning table (dcpctl/tuning/attention/device_name=<GPU>.json)
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from dcpctl import tuning
from dcpctl.plan.attention_names import MEASURED

PAGE = 64


def table_from_bench(res: dict[str, Any], command: str) -> dict[str, Any]:
    """A tuning-table document from `bench kernel`'s result: cells carry
    `backends: {name: {time_us, ...}}`."""
    cells = [{"heads": c["heads"], "kv_dtype": res["kv_dtype"], "page_size": res.get("page_size", PAGE),
              "device": res["device"], "batch": c["batch"], "ctx": c["ctx"],
              "us": {b: round(r["time_us"], 2)
                     for b, r in c["backends"].items() if r.get("time_us") is not None}}
             for c in res["cells"]]
    return {"kind": "attention", "device": res["device"], "sm": res.get("sm"), "command": command,
            "commit": tuning.source_commit(), "data": {"cells": cells}}


def write(table: dict[str, Any], path: Path) -> None:
    unknown = {b for c in table["data"]["cells"] for b in c["us"]} - set(MEASURED)
    if unknown:
        raise ValueError(f"unknown backends {sorted(unknown)}; valid: {list(MEASURED)}")
    tuning.write(path, **table)
