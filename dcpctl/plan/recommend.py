"""Search DCP sizes, exchange backends and Q replication for a workload; find crossovers.

With a performance model (plan/perf.py `Model`, as `dcpctl recommend` passes) every choice is ranked by its
full decode step (TPOT: compute + collectives + host gap, the middle of the collectives' band); without one,
by the attention block of plan/cost.py."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from dcpctl.plan.compose import past_positions
from dcpctl.plan.cost import Choice, Constants, StepCost, layer_cost, to_dict
from dcpctl.plan.engines import target
from dcpctl.plan.figures import UnknownFigures, constants_for
from dcpctl.plan.planner import Plan, make_plan
from dcpctl.plan.request import PlanRequest

MAX_SEARCH = 1 << 16
PAST_POSITIONS = "past_positions"  # a crossover cell whose context is past the model's positions


def candidates(req: PlanRequest) -> list[Choice]:
    """The DCP sizes, exchanges and Q replication the plan's engine offers (plan/engines.py)."""
    return target(req.engine).candidates(req)


def _request(req: PlanRequest, ch: Choice, context: int) -> PlanRequest:
    return replace(req, topology=replace(req.topology, dcp_size=ch.dcp), context_len=context,
                   dcp_comm_backend=None if ch.dcp == 1 else ch.backend,
                   dcp_replicate_q_proj=None if ch.dcp == 1 else ch.replicate_q)


@dataclass(frozen=True)
class Row:
    choice: Choice
    valid: bool
    max_concurrency: int
    cost: StepCost | None
    reason: str = ""
    step: Any = None            # perf.Decode: the full step, when a performance model is given


def evaluate(req: PlanRequest, ch: Choice, context: int, concurrency: int, k: Constants,
             model: Any = None) -> Row:
    p = make_plan(_request(req, ch, context))
    if not p.valid:
        return Row(ch, False, 0, None, "; ".join(v.code for v in p.violations))
    if p.decisions["dcp_comm_backend"].value != ch.backend and ch.dcp > 1:
        return Row(ch, False, 0, None, "a model override picks another backend")
    batch = -(-concurrency // req.topology.attn_dp)
    cost = layer_cost(req.model, req.topology.attn_tp, ch, batch, context,
                      p.decisions["kv_cache_dtype"].value, k)
    step = (model.decode(p.request, p.decisions, batch, context, model.measures(ch))
            if model is not None else None)
    return Row(ch, True, p.memory.get("max_concurrency", 0), cost, step=step)


def attention_ms(req: PlanRequest, row: Row) -> float:
    layers = -(-len(req.model.mla_layers) // req.topology.pp_size)
    return row.cost.layer_s * layers * 1e3 if row.cost else float("inf")


def step_ms(req: PlanRequest, row: Row) -> float:
    """What choices are ranked by: the full step's TPOT (the middle of its band) when modelled, else
    attention."""
    if row.step is not None:
        return row.step.mid_s * 1e3
    return attention_ms(req, row)


def crossover(req: PlanRequest, ch: Choice, context: int, k: Constants, model: Any = None) -> int | None:
    """Smallest concurrency at which `ch` beats DCP 1 (or DCP 1 no longer fits)."""
    base = evaluate(req, Choice(1, "none", False), context, 1, k)

    def wins(n: int) -> bool:
        a, b = evaluate(req, ch, context, n, k, model), evaluate(req, Choice(1, "none", False), context, n, k,
                                                                 model)
        if not a.valid or (a.max_concurrency < n):
            return False
        return n > base.max_concurrency or (a.cost is not None and b.cost is not None
                                            and step_ms(req, a) < step_ms(req, b))

    # probe the top of the range where `ch` fits: past DCP 1's limit, or `ch`'s own limit when that is lower
    # (a cap both share, e.g. --max-running-requests, would otherwise hide a win below it)
    hi = max(min(base.max_concurrency + 1, evaluate(req, ch, context, 1, k).max_concurrency), 1)
    if not wins(min(hi, MAX_SEARCH)):
        return None
    lo = 0
    while hi - lo > 1:  # the cost difference is linear in n: one sign change
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if wins(mid) else (mid, hi)
    return hi


def recommend(req: PlanRequest, context: int, concurrency: int, k: Constants,
              model: Any = None) -> dict[str, Any]:
    rows = [evaluate(req, ch, context, concurrency, k, model) for ch in candidates(req)]
    table = []
    for r in rows:
        d = {"choice": r.choice.label, "valid": r.valid, "max_concurrency": r.max_concurrency,
             "fits": r.valid and r.max_concurrency >= concurrency, "step_attention_ms": attention_ms(req, r),
             "note": r.reason}
        if r.cost:
            d.update({k2: v for k2, v in to_dict(r.cost, 1).items() if k2.endswith("_us")})
            d["tokens_per_s"] = concurrency / (step_ms(req, r) / 1e3) if d["fits"] else 0.0
        if r.step is not None:
            d.update(_step_dict(r.step))
        table.append(d)
    fitting = [(step_ms(req, r), r) for r in rows if r.valid and r.max_concurrency >= concurrency]
    past = past_positions(req, context)
    if past:
        for d in table:
            d["note"] = past
        return {"context_len": context, "concurrency": concurrency, "constants": k.source, "table": table,
                "recommendation": {"choice": None, "reason": f"context {context:,} is {past}"}}
    return {"context_len": context, "concurrency": concurrency, "constants": k.source, "table": table,
            "recommendation": _pick(req, fitting, rows, concurrency)}


def _step_dict(s: Any) -> dict[str, Any]:
    """The full step's figures (perf.Decode) in ms, with their labels."""
    return {"tpot_ms": s.mid_s * 1e3, "tpot_low_ms": s.low_s * 1e3,
            "tpot_high_ms": s.high_s * 1e3, "compute_ms": s.compute.seconds * 1e3,
            "compute_label": s.compute.label, "communication_low_ms": s.comm_low_s * 1e3,
            "communication_high_ms": s.comm_high_s * 1e3, "host_gap_ms": s.host.seconds * 1e3}


def crossovers(req: PlanRequest, k: Constants, contexts: list[int],
               model: Any = None) -> list[dict[str, Any]]:
    """Per DCP choice, its crossover concurrency at each context length: a number, None (never), or
    PAST_POSITIONS where the context is past the model's positions (no choice serves it)."""
    out = []
    for ch in candidates(req):
        if ch.dcp > 1:
            out.append({"choice": ch.label, **{str(L): PAST_POSITIONS if past_positions(req, L) else
                                               crossover(req, ch, L, k, model) for L in contexts}})
    return out


def _pick(req: PlanRequest, fitting: list[tuple[float, Row]], rows: list[Row], n: int) -> dict[str, Any]:
    if not fitting:
        best = max((r for r in rows if r.valid), key=lambda r: r.max_concurrency, default=None)
        most = f"; the most any choice fits is {best.max_concurrency} ({best.choice.label})" if best else ""
        return {"choice": None, "reason": f"no choice fits {n} concurrent requests{most}"}
    ms, r = min(fitting, key=lambda x: (round(x[0], 6), x[1].choice.dcp))
    base = next((row for row in rows if row.choice.dcp == 1), None)
    unit = "ms TPOT, the full step" if r.step is not None else "ms attention per step"
    if r.choice.dcp == 1:
        why = "DCP 1 fits and is fastest: the exchange costs more than the KV read DCP would save"
    elif base is None or not base.valid or base.max_concurrency < n:
        why = f"DCP 1 fits only {base.max_concurrency if base else 0} requests; {r.choice.label} fits " \
              f"{r.max_concurrency} and is the fastest choice that fits ({ms:.3f} {unit})"
    else:
        why = f"{r.choice.label} is fastest: {ms:.3f} ms vs {step_ms(req, base):.3f} ms for DCP 1 ({unit})"
    if r.step is not None:
        why += f"; {_parts(r.step)}"
    out = {"choice": r.choice.label, "dcp_size": r.choice.dcp, "dcp_comm_backend": r.choice.backend,
           "dcp_replicate_q_proj": r.choice.replicate_q, "step_attention_ms": attention_ms(req, r),
           "reason": why}
    return {**out, **({"tpot_ms": ms} if r.step is not None else {})}


def _parts(s: Any) -> str:
    return (f"its step: compute {s.compute.seconds * 1e3:.2f} ms ({s.compute.label}) + collectives "
            f"{s.comm_low_s * 1e3:.2f}-{s.comm_high_s * 1e3:.2f} ms (modelled) + host gap "
            f"{s.host.seconds * 1e3:.3f} ms")


def estimate(p: Plan, concurrency: int, calibration: str | None = None) -> dict[str, Any]:
    """The plan's own choice against DCP 1 from the cost model (`recommend` searches all); with unknown
    cost figures, no estimate and why."""
    r, d = p.request, p.decisions
    try:
        k = constants_for(r.hardware, r.topology.attn_tp, calibration)
    except UnknownFigures as e:
        return {"concurrency": concurrency, "constants": None, "unavailable": str(e)}
    mine = Choice(r.topology.dcp_size, d["dcp_comm_backend"].value if r.topology.dcp_size > 1 else "none",
                  bool(d["dcp_replicate_q_proj"].value))
    out: dict[str, Any] = {"concurrency": concurrency, "constants": k.source}
    for name, ch in (("plan", mine), ("dcp1", Choice(1, "none", False))):
        row = evaluate(r, ch, r.context_len or 1, concurrency, k)
        out[name] = {"choice": row.choice.label, "step_attention_ms": step_ms(r, row),
                     "fits": row.valid and row.max_concurrency >= concurrency}
    out["speedup_vs_dcp1"] = out["dcp1"]["step_attention_ms"] / out["plan"]["step_attention_ms"]
    return out
