"""The performance model `dcpctl recommend` ranks its choices with, and the measured file's choice among them.

    step_model(req, measured, calibration)
        -> perf.Model whose `measures(choice)` says which choice the file measured

A `dcpctl bench rank` file measures one deployment: recommend finds it among the choices (same DCP size,
exchange and Q replication) and checks the rest of it against the request (perf_measured.check_matches); its
cells replace the model's compute for that choice, and the terms fitted on them price every choice.
"""
from __future__ import annotations

from dataclasses import replace

from dcpctl.plan.cost import Choice
from dcpctl.plan.errors import UserError
from dcpctl.plan.perf import Model
from dcpctl.plan.perf_measured import Measured, check_matches
from dcpctl.plan.planner import make_plan
from dcpctl.plan.request import PlanRequest


def measured_choice(ms: Measured) -> Choice:
    p = ms.plan
    c = int(p["dcp_size"])
    return Choice(c, str(p["dcp_comm_backend"]) if c > 1 else "none",
                  bool(p["dcp_replicate_q_proj"]) and c > 1)


def step_model(req: PlanRequest, measured: Measured | None, calibration: str | None) -> Model:
    """The model for every choice of `req` (the request before a DCP choice is made)."""
    if measured is None:
        return Model.for_request(req, {}, None, calibration)
    from dcpctl.plan.recommend import candidates
    ch = measured_choice(measured)
    if ch not in candidates(req):
        raise UserError(f"--measured {measured.path} was measured for {ch.label}, which is not one of this "
                        "request's choices: measure one of them with `dcpctl bench rank`")
    p = make_plan(replace(req, topology=replace(req.topology, dcp_size=ch.dcp),
                          dcp_comm_backend=None if ch.dcp == 1 else ch.backend,
                          dcp_replicate_q_proj=None if ch.dcp == 1 else ch.replicate_q))
    check_matches(measured, p.request, p.decisions)
    return replace(Model.for_request(p.request, p.decisions, measured, calibration), measured_choice=ch)
