"""`--measured FILE`: a `dcpctl bench rank` document, read torch-free, checked against the plan, used two
ways.

    read_measured(path) -> Measured          refuses (one sentence) a file of another kind or version, or one
                                             missing a required key (docs/recommend.md: the file's format)
    check_matches(measured, req, decisions)  refuses a file measured for another deployment or GPU
    measured.compute_s(batch, context)       a measured cell's compute (the whole model's layers), else None
    measured.calibrate(terms, features)      the decode terms fitted on the file's cells (perf_terms.fit)
    measured.ran(cell), ran_s(cell)          how a cell ran (perf_work.Ran) and its measured seconds as run

A cell's compute is the CUDA-graph decode step minus the stand-in collectives' copies, scaled to all layers
(`compute_us_full`). The deployment waits for its busiest rank, so a cell measured with `busiest` routing (the
rank whose experts get the most rows) is the one used where the file has it. The model is fitted on `uniform`
cells as they ran: the layers run (`compute_us` over `layers_run` of them, `dense_layers_run` dense, under
--layers), the distinct experts they read (`experts_active`: bench rank's uniform routing is balanced, not
random) and the attention kernel each ran (`attention_backend`); it then predicts the deployment (all layers,
random routing).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from dcpctl import tuning
from dcpctl.plan.attention_names import MEASURED
from dcpctl.plan.attention_table import KV_NAMES
from dcpctl.plan.errors import UserError
from dcpctl.plan.perf_terms import Terms, fit
from dcpctl.plan.perf_work import Ran
from dcpctl.plan.request import PlanRequest
from dcpctl.plan.weights import weight_format

KIND, VERSION = "dcpctl.bench.rank", 1
REQUIRED = ("command", "device", "plan", "weights", "host_gap_us", "cells")
PLAN_KEYS = ("architectures", "weights_dtype", "tp_size", "dcp_size", "ep_size", "attn_dp_size",
             "kv_cache_dtype", "dcp_comm_backend", "dcp_replicate_q_proj", "num_layers")
CELL_KEYS = ("batch", "context", "routing", "compute_us", "compute_us_full")


@dataclass(frozen=True)
class Measured:
    path: str
    doc: dict[str, Any]

    @property
    def plan(self) -> dict[str, Any]:
        return self.doc["plan"]

    @property
    def host_gap_s(self) -> float | None:
        """The measured host gap; None where the run could not measure one (`host_gap_measured` false)."""
        if self.doc.get("host_gap_measured") is False:
            return None
        return float(self.doc["host_gap_us"]) * 1e-6

    def cells(self, routing: str) -> list[dict[str, Any]]:
        return [c for c in self.doc["cells"] if c["routing"] == routing]

    def compute_s(self, batch: int, context: int) -> float | None:
        for routing in ("busiest", "uniform"):
            for c in self.cells(routing):
                if c["batch"] == batch and c["context"] == context:
                    return float(c["compute_us_full"]) * 1e-6
        return None

    @property
    def subset(self) -> bool:
        """Whether the run ran fewer layers than the model's (--layers)."""
        run = self.plan.get("layers_run")
        return run is not None and run < self.plan["num_layers"]

    def ran(self, cell: dict[str, Any], own_experts: bool = True) -> Ran:
        """How a cell ran (own_experts False: the model's expected experts, not the cell's count)."""
        p, kernel = self.plan, cell.get("attention_backend")
        experts = cell.get("experts_active") if own_experts else None
        return Ran(p["layers_run"] if self.subset else None,
                   p.get("dense_layers_run") if self.subset else None,
                   None if experts is None else float(experts), kernel if kernel in MEASURED else None)

    def ran_s(self, cell: dict[str, Any]) -> float:
        """A cell's measured compute as run: over the layers run (`compute_us`) under --layers, else all."""
        return float(cell["compute_us"] if self.subset else cell["compute_us_full"]) * 1e-6

    def calibrate(self, prior: Terms, features: Callable[[int, int, Ran], list[float]]) -> Terms:
        """The terms fitted on the file's uniform cells as they ran (prior: the GPU's perf table, else
        assumed); features(batch, context, ran) are the model's for the plan's step."""
        cells = self.cells("uniform") or self.cells("busiest")
        rows = [(features(c["batch"], c["context"], self.ran(c)), self.ran_s(c)) for c in cells]
        return fit(rows, prior,
                   f"fitted on {self.path}'s {len(rows)} cells (prior: {prior.label}, {prior.source})")


def read_measured(path: str | Path) -> Measured:
    """The document at path, its kind, version and required keys checked."""
    p = str(path)
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"--measured {p}: cannot read a JSON document ({e})") from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND or doc.get("version") != VERSION:
        got = (doc.get("kind"), doc.get("version")) if isinstance(doc, dict) else type(doc).__name__
        raise UserError(f"--measured {p} is not a `dcpctl bench rank` file of version {VERSION} (kind "
                        f"{KIND!r}), got {got}")
    missing = [k for k in REQUIRED if k not in doc] + [f"plan.{k}" for k in PLAN_KEYS
                                                       if not isinstance(doc.get("plan"), dict)
                                                       or k not in doc["plan"]]
    cells = doc.get("cells") if isinstance(doc.get("cells"), list) else []
    bad = [c for c in cells if not isinstance(c, dict) or any(k not in c for k in CELL_KEYS)]
    if missing or not cells or bad:
        what = ", ".join(missing) or ("cells" if not cells else f"{', '.join(CELL_KEYS)} in a cell")
        raise UserError(f"--measured {p} lacks {what}: write it with `dcpctl bench rank --format json`")
    return Measured(p, doc)


def _plan_values(req: PlanRequest, decisions: dict[str, Any]) -> dict[str, Any]:
    t, m = req.topology, req.model
    c, kv = t.dcp_size, decisions["kv_cache_dtype"].value
    return {"architectures": list(m.architectures),
            "weights_dtype": "fp8" if weight_format(m, req.hardware)[0]
            else KV_NAMES.get(m.dtype, m.dtype), "tp_size": t.tp_size, "dcp_size": c, "ep_size": t.ep_size,
            "attn_dp_size": t.attn_dp,
            "kv_cache_dtype": KV_NAMES.get(kv, kv),
            "dcp_comm_backend": decisions["dcp_comm_backend"].value if c > 1 else None,
            "dcp_replicate_q_proj": bool(decisions["dcp_replicate_q_proj"].value) and c > 1,
            "num_layers": m.num_layers}


def check_matches(ms: Measured, req: PlanRequest, decisions: dict[str, Any]) -> None:
    """UserError naming the first difference between the file's deployment (or GPU) and the plan's."""
    mine, theirs = _plan_values(req, decisions), dict(ms.plan)
    theirs["kv_cache_dtype"] = KV_NAMES.get(str(theirs.get("kv_cache_dtype")), theirs.get("kv_cache_dtype"))
    if theirs.get("dcp_size") == 1:
        theirs["dcp_comm_backend"], theirs["dcp_replicate_q_proj"] = None, False
    theirs["dcp_replicate_q_proj"] = bool(theirs.get("dcp_replicate_q_proj"))
    for key, value in mine.items():
        if theirs.get(key) != value:
            raise UserError(f"--measured {ms.path} was measured for {key} {theirs.get(key)!r}, but the plan "
                            f"has {value!r}: measure this plan with `dcpctl bench rank` (same flags) or drop "
                            "--measured")
    device = str(ms.doc["device"].get("name", "")) if isinstance(ms.doc["device"], dict) else ""
    if req.hardware.device == "cuda" and not tuning.same_gpu(device, req.hardware.gpu_name):
        raise UserError(f"--measured {ms.path} was measured on {device or 'an unnamed GPU'}, but the plan's "
                        f"hardware {req.hardware.name} is {req.hardware.gpu_name}: its compute is not this "
                        "GPU's")
