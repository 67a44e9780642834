"""Which local MLA decode backend the bundled runtime runs: one rule per (kernel heads, KV dtype, page size,
GPU).

The rule comes from a measured table (`dcpctl bench kernel --save-table FILE` writes one): the GPU's attention
tuning table (dcpctl/tuning/attention, by dcpctl.tuning's device rule), or the file of --attention-table; per
measured cell (batch, local context) the backend that was fastest there, among those available.  A step runs
the winner of the nearest measured cell (log distance in batch and context), so the choice is per cell, not
one backend for every shape.  `--attention-backend` fixes one where its value names a backend (the names and
the one mapping from SGLang's flag values: plan/attention_names.py); `auto` and SGLang kernels the bundled
runtime does not have read the table.  Pure and torch-free: the plan shows the rule and the runtime's selector
(runtime/attention/selector.py) runs it, one function.

The runtime's registry (runtime/attention/backends) hands `decide` every kernel it has; a name beyond the
measured ones is weighed by the same rule, after them, so a kernel added as one file is chosen by the table
that names it.
"""
from __future__ import annotations

import functools
import importlib.util
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from dcpctl import tuning
from dcpctl.plan.attention_names import MEASURED, PORTABLE, REFERENCE, from_flag
from dcpctl.plan.errors import UserError
from dcpctl.plan.request import PlanRequest

FLASHMLA_PAGE = 64                        # FlashMLA's Config::PAGE_BLOCK_SIZE: the only page size its kernel
                                          # reads
# plan -> table names
KV_NAMES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64"}


@dataclass(frozen=True)
class Key:
    heads: int          # kernel heads: local heads x dcp
    kv_dtype: str       # bf16, fp16, fp8_e4m3
    page_size: int      # tokens per physical page
    device: str         # the GPU's name as torch reports it (matched without vendor prefix and case)

    def text(self) -> str:
        return f"{self.heads} kernel heads, {self.kv_dtype} KV, page {self.page_size} on {self.device}"


@dataclass(frozen=True)
class Rule:
    """The winner per measured (batch, ctx) cell of one key, or one backend for all (`fixed`)."""

    key: Key
    cells: tuple[tuple[int, int, str], ...]
    fixed: str | None
    reason: str

    def pick(self, batch: int, ctx: int) -> str:
        if self.fixed is not None:
            return self.fixed
        return _pick(self.cells, max(batch, 1), max(ctx, 1))

    def summary(self) -> str:
        if self.fixed is not None:
            return self.fixed
        names = known(c[2] for c in self.cells)
        wins = {b: [c for c in self.cells if c[2] == b] for b in names}
        main = max(names, key=lambda b: len(wins[b]))
        rest = [f"{b} at {_where(wins[b])}" for b in names if b != main and wins[b]]
        return main + (f" ({'; '.join(rest)})" if rest else "")


def known(more: Iterable[str] = ()) -> tuple[str, ...]:
    """The measured names, then any other name the runtime registered (a kernel added as one file), in
    order."""
    return tuple(dict.fromkeys((*MEASURED, *more)))


@functools.lru_cache(maxsize=4096)
def _pick(cells: tuple[tuple[int, int, str], ...], batch: int, ctx: int) -> str:
    near = min(cells, key=lambda c: abs(math.log2(c[0] / batch)) + abs(math.log2(c[1] / ctx)))
    return near[2]


def _where(cells: list[tuple[int, int, str]]) -> str:
    return ", ".join(f"B={b} ctx={_k(c)}" for b, c, _ in cells)


def _k(n: int) -> str:
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)


def table_for(device: str, sm: int | None, override: str | None = None) -> dict[str, Any]:
    """The table in effect for a GPU: the file of --attention-table, else the GPU's tuning table (none: no
    cells)."""
    if override:
        return load_table(override)
    t = tuning.load("attention", device, sm)
    return {"source": f"the attention tuning table: {t.how}", "cells": t.data["cells"] if t.data else []}


def load_table(path: str | Path) -> dict[str, Any]:
    """A table file: `dcpctl bench kernel --save-table`'s (its `data`: {"cells": [{heads, kv_dtype, page_size,
    device, batch, ctx, us: {backend: us}}]})."""
    try:
        return _read(str(path))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"attention backend table {path}: not a table `dcpctl bench kernel --save-table` "
                        f"writes ({e})") from None


@functools.lru_cache(maxsize=8)
def _read(path: str) -> dict[str, Any]:
    doc = json.loads(Path(path).read_text())
    doc = {"source": f"{path} (measured on {doc['device']}, commit {doc['commit']})",
           "cells": doc["data"]["cells"]}
    for c in doc["cells"]:
        if not all(k in c for k in ("heads", "kv_dtype", "page_size", "device", "batch", "ctx", "us")):
            raise ValueError(f"a cell lacks a field: {c}")
    return doc


def decide(key: Key, requested: str, available: dict[str, str | None], table: dict[str, Any]) -> Rule:
    """The rule for key.  requested: --attention-backend (plan/attention_names.py maps it to a backend);
    available: backend -> None when it can run here, else why not (a clause); a name beyond the measured ones
    (a kernel the runtime registered) is weighed like them, after them."""
    names = known(available)
    usable = [b for b in names if available.get(b, "not known to this runtime") is None]
    asked = from_flag(requested)
    if not usable:
        return Rule(key, (), REFERENCE, "no kernel backend runs here: "
                    + "; ".join(f"{b}: {available.get(b)}" for b in names))
    if asked == REFERENCE:
        return Rule(key, (), REFERENCE, f"set by --attention-backend {requested}: the torch reference")
    if asked in names:
        if asked in usable:
            return Rule(key, (), asked, f"set by --attention-backend {requested}")
        why = available.get(asked, "not known to this runtime")
        return Rule(key, (), usable[0], f"--attention-backend {requested} asked for, but {why}")
    ask = "" if requested == "auto" else f"--attention-backend {requested} is not a bundled-runtime kernel; "
    return _measured(key, names, usable, available, table, ask)


def _measured(key: Key, names: tuple[str, ...], usable: list[str], available: dict[str, str | None],
              table: dict[str, Any], ask: str) -> Rule:
    mine = [c for c in table["cells"] if c["heads"] == key.heads and c["kv_dtype"] == key.kv_dtype
            and c["page_size"] == key.page_size]
    timed = [(c["batch"], c["ctx"], {b: c["us"][b] for b in usable if c["us"].get(b) is not None})
             for c in mine]
    timed = [t for t in timed if t[2]]
    src = table.get("source", "the measured table")
    if not timed:
        why = f"no measured cell for {key.text()} in {src}"
        return Rule(key, (), PORTABLE if PORTABLE in usable else usable[0], ask + why)
    cells = tuple((b, ctx, min(us, key=us.get)) for b, ctx, us in timed)
    missing = [f"{b}: {available.get(b, 'not known to this runtime')}" for b in names if b not in usable]
    why = (f"{ask}measured ({src}): the fastest per cell of {len(cells)}, the nearest cell per step"
           + (f"; not available: {', '.join(missing)}" if missing else ""))
    return Rule(key, cells, cells[0][2] if len({c[2] for c in cells}) == 1 else None, why)


def flashinfer_installed() -> bool:
    """Whether an installed FlashInfer package is importable (a bare `flashinfer/` folder on sys.path, such as
    this repository's benchmarks/flashinfer, is a namespace package with no code: not FlashInfer)."""
    spec = importlib.util.find_spec("flashinfer")
    return spec is not None and spec.origin not in (None, "namespace")


def flashmla_page_blocker(page_size: int | None) -> str | None:
    """Why FlashMLA's kernel cannot read this page size, or None."""
    if page_size is not None and page_size != FLASHMLA_PAGE:
        return f"page size {page_size}: FlashMLA's kernel reads pages of {FLASHMLA_PAGE} rows only"
    return None


def plan_available(page_size: int) -> dict[str, str | None]:
    """The backends the plan's rule weighs: ours, FlashInfer where installed as a package, never FlashMLA
    (built from source at run time); the runtime weighs what it finds and says its own rule once."""
    fi = None if flashinfer_installed() else ("FlashInfer is not installed as a package (pip install "
                                              "'dcpctl[flashinfer]'; a source build is found at run time)")
    return {PORTABLE: None, "flashinfer": fi,
            "flashmla": flashmla_page_blocker(page_size) or "FlashMLA is built from source at run time "
                                                           "(docs/generate.md), outside the plan's rule"}


def plan_decision(req: PlanRequest, kv_dtype: str, page_size: int) -> tuple[str, str]:
    """(the rule's summary, reason) for the plan: the same `decide` the runtime runs, from the plan's
    facts."""
    hw, t = req.hardware, req.topology
    if hw.device != "cuda":
        return REFERENCE, f"{hw.device}: the bundled runtime's torch reference attention"
    key = Key(req.model.num_heads // t.attn_tp * t.dcp_size, KV_NAMES.get(kv_dtype, kv_dtype), page_size,
              hw.gpu_name)
    table = table_for(hw.gpu_name, hw.sm, req.attention_table)
    rule = decide(key, req.attention_backend, plan_available(page_size), table)
    return rule.summary(), f"the bundled runtime's local attention for {key.text()}: {rule.reason}"
