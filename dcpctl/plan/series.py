"""Crossover series: modelled attention step time against concurrency for every choice, per context length.

Plain values for `dcpctl recommend --picture` (dcpctl/plot/crossover.py draws them). Every point is
`recommend.evaluate` at that concurrency, the same model as the table, so the picture and the
crossover table agree; a curve ends at the largest concurrency its choice fits.
"""
from __future__ import annotations

from typing import Any

from dcpctl.plan.compose import past_positions
from dcpctl.plan.cost import Constants
from dcpctl.plan.recommend import MAX_SEARCH, candidates, evaluate, step_ms
from dcpctl.plan.request import PlanRequest

POINTS = 36  # log-spaced concurrencies per panel, plus every curve's end and crossover


def _grid(top: int, extra: set[int]) -> list[int]:
    top = max(1, min(top, MAX_SEARCH))
    ns = {round(top ** (i / (POINTS - 1))) for i in range(POINTS)}
    return sorted(n for n in ns | extra if 1 <= n <= top)


def _wins(curves: list[dict[str, Any]], crossovers: list[dict[str, Any]],
          context: int) -> list[dict[str, Any]]:
    """Per DCP size, its earliest crossover over the backends (from None: that size never beats DCP 1)."""
    at = _numbers(crossovers, context)
    out: dict[int, dict[str, Any]] = {}
    for c in curves:
        if c["dcp"] == 1:
            continue
        n, best = at.get(c["choice"]), out.setdefault(c["dcp"],
                                                      {"dcp": c["dcp"], "choice": None, "from": None})
        if n is not None and (best["from"] is None or n < best["from"]):
            best.update(choice=c["choice"], **{"from": n})
    return list(out.values())


def panel(req: PlanRequest, k: Constants, context: int, concurrency: int,
          crossovers: list[dict[str, Any]]) -> dict[str, Any]:
    """One context length: every candidate's curve, where DCP 1 stops fitting, where each DCP size wins."""
    firsts = [evaluate(req, ch, context, 1, k) for ch in candidates(req)]
    at = _numbers(crossovers, context)
    top = max([concurrency, *(r.max_concurrency for r in firsts if r.valid)])
    extra = {r.max_concurrency for r in firsts} | {n for n in at.values() if n} | {concurrency}
    grid = _grid(top, extra)
    curves = []
    for first in firsts:
        ch = first.choice
        pts = [[n, step_ms(req, evaluate(req, ch, context, n, k))] for n in grid
               if first.valid and n <= first.max_concurrency]
        curves.append({"choice": ch.label, "dcp": ch.dcp, "backend": ch.backend,
                       "replicate_q": ch.replicate_q, "valid": first.valid, "note": first.reason,
                       "max_concurrency": first.max_concurrency, "points": pts})
    dcp1 = next(c for c in curves if c["dcp"] == 1)
    return {"context_len": context, "dcp1_max_concurrency": dcp1["max_concurrency"], "curves": curves,
            "wins": _wins(curves, crossovers, context), "past_positions": past_positions(req, context)}


def _numbers(crossovers: list[dict[str, Any]], context: int) -> dict[str, int | None]:
    """Each choice's crossover at `context` as a number, or None (never, or past the model's positions)."""
    return {c["choice"]: v if isinstance(v := c.get(str(context)), int) else None for c in crossovers}


def crossover_series(req: PlanRequest, k: Constants, result: dict[str, Any],
                     contexts: list[int]) -> dict[str, Any]:
    """`recommend`'s result (its crossovers) -> one panel per context length, with the workload's labels."""
    return {"model": req.model.name, "hardware": req.hardware.name, "constants": k.source,
            "context_len": result["context_len"], "concurrency": result["concurrency"],
            "recommendation": result["recommendation"]["choice"],
            "panels": [panel(req, k, L, result["concurrency"], result["crossovers"]) for L in contexts]}
