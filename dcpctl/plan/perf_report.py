"""The plan's `performance` section: DCP off against the planned DCP at one workload, every figure labelled.

    performance(plan, workload, measured=None, calibration=None) -> dict | None

For a workload of prompts of `input_len` tokens, `output_len` output tokens and `concurrency` requests in
flight:

- max concurrency: the plan's memory model at input + output tokens (derived);
- TPOT at the mean decode context (input + output / 2), with min(concurrency, max concurrency) requests spread
  over the attention-DP replicas: decode compute + collectives (modelled band) + host gap;
- TTFT of one prompt of `input_len` tokens on an idle server (plan/perf_prefill.py);
- output tok/s per GPU, served: N requests in flight each cost a prefill and `output_len` decode steps, so
  N * output_len tokens take output_len * TPOT + the N prompts' prefill (chunks shared, perf_prefill.prefill):
  N * output_len / (that) / the engine's GPUs.

A figure is {"value", "label", "source"} (bands add "low" and "high"; value is their middle). Labels: measured
(here, by the file named), calibrated (terms fitted to measurements, named), derived (arithmetic on other
figures), assumed (a rule of thumb, sourced), modelled (communication: never measured on one GPU).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from dcpctl.plan import engines
from dcpctl.plan.errors import UserError
from dcpctl.plan.perf import COMM_SOURCE, Decode, Model
from dcpctl.plan.perf_measured import Measured, check_matches
from dcpctl.plan.perf_prefill import Ttft
from dcpctl.plan.planner import Plan, make_plan
from dcpctl.plan.request import PlanRequest

DEFAULT_INPUT, DEFAULT_OUTPUT, DEFAULT_CONCURRENCY = 4096, 1024, 32


@dataclass(frozen=True)
class Workload:
    input_len: int = DEFAULT_INPUT
    output_len: int = DEFAULT_OUTPUT
    concurrency: int = DEFAULT_CONCURRENCY

    @property
    def context(self) -> int:
        """The mean context over a request's decode steps."""
        return self.input_len + self.output_len // 2

    @property
    def max_context(self) -> int:
        return self.input_len + self.output_len


def fig(value: float, label: str, source: str, low: float | None = None, high: float | None = None,
        scale: float = 1.0) -> dict[str, Any]:
    d: dict[str, Any] = {"value": _r(value * scale)}
    if low is not None and high is not None:
        d.update(low=_r(low * scale), high=_r(high * scale))
    return {**d, "label": label, "source": source}


def _r(x: float) -> float:
    return float(f"{x:.4g}")


def performance(p: Plan, w: Workload, measured: Measured | None = None,
                calibration: str | None = None) -> dict[str, Any] | None:
    """The section for a valid plan with a model (None otherwise); `unavailable` says why there are no
    figures."""
    r = p.request
    if not p.valid or p.topology_only:
        return None
    head = {"workload": {"input_len": w.input_len, "output_len": w.output_len, "concurrency": w.concurrency,
                         "decode_context": w.context, "max_context": w.max_context,
                         "chunked_prefill_size": r.chunked_prefill_size},
            "predicts": "the bundled runtime (dcpctl launch) serving this plan"}
    engine = engines.target(r.engine)
    if not engine.bundled_runtime:
        return {**head, "unavailable": "the performance model predicts the bundled runtime's step; plans "
                                       f"under --engine {engine.name} have none"}
    if measured is not None:
        check_matches(measured, r, p.decisions)
    try:
        model = Model.for_request(r, p.decisions, measured, calibration)
    except UserError as e:
        return {**head, "unavailable": str(e)}
    cols = [_column(model, req, d, mem, w, is_plan and measured is not None)
            for req, d, mem, is_plan in _deployments(r, w)]
    return {**head, "decode_terms": {"label": model.terms.label, "source": model.terms.source},
            "prefill_rates": {"label": model.rates.label, "source": model.rates.source},
            "measured": measured.path if measured else None, "columns": cols}


def _deployments(r: PlanRequest,
                 w: Workload) -> list[tuple[PlanRequest, dict[str, Any], dict[str, Any], bool]]:
    """(request, decisions, memory, is the plan) for DCP off and, when the plan has DCP, the plan; an invalid
    one (a request of the workload's length past the model's positions, say) has empty decisions and memory
    holding its first violation."""
    out = []
    off = replace(r, topology=replace(r.topology, dcp_size=1), dcp_comm_backend=None,
                  dcp_replicate_q_proj=None)
    for req, mine in (((off, r.topology.dcp_size == 1), (r, True)) if r.topology.dcp_size > 1
                      else ((r, True),)):
        p = make_plan(replace(req, context_len=w.max_context))
        why = {"invalid": f"{p.violations[0].code}: {p.violations[0].message}"} if p.violations else {}
        out.append((p.request, p.decisions if p.valid else {}, p.memory if p.valid else why, mine))
    return out


def _column(model: Model, req: PlanRequest, d: dict[str, Any], mem: dict[str, Any], w: Workload,
            measured_ok: bool) -> dict[str, Any]:
    t = req.topology
    col: dict[str, Any] = {"choice": _label(t.dcp_size, d), "dcp_size": t.dcp_size}
    if not d:
        return {**col,
                "unavailable": f"not valid with requests of {w.max_context:,} tokens ({mem['invalid']})"}
    fit = int(mem.get("max_concurrency", 0))
    col["max_concurrency"] = fig(fit, "derived",
                                 f"the plan's memory model at {w.max_context:,} tokens a request")
    n = min(w.concurrency, fit)
    if n == 0:
        return {**col, "unavailable": f"not one request of {w.max_context:,} tokens fits the KV budget"}
    batch = -(-n // t.attn_dp)
    dec = model.decode(req, d, batch, w.context, measured_ok)
    tt = model.prefill(req, w.input_len)
    batch_prefill = model.prefill(req, w.input_len, n)
    request_s = model.rates.request_s
    col.update(concurrency=n, batch_per_replica=batch, **_decode_figures(dec))
    pre = f"prefill {model.rates.label} ({model.rates.source}); {tt.chunks} chunk(s) of at most " \
          f"{req.chunked_prefill_size:,} tokens; communication modelled ({COMM_SOURCE})"
    col["ttft_ms"] = fig(tt.mid_s, "derived", pre, tt.low_s, tt.high_s, 1e3)
    col["output_tok_s_per_gpu"] = _served(n, w, dec, batch_prefill, request_s, t.world)
    return col


def _decode_figures(dec: Decode) -> dict[str, Any]:
    c, h, work = dec.compute, dec.host, dec.work
    return {
        "decode_compute_ms": fig(c.seconds, c.label, c.source, scale=1e3),
        "communication_ms": fig((dec.comm_low_s + dec.comm_high_s) / 2, "modelled", COMM_SOURCE,
                                dec.comm_low_s, dec.comm_high_s, 1e3),
        "host_gap_ms": fig(h.seconds, h.label, h.source, scale=1e3),
        "tpot_ms": fig(dec.mid_s, "derived", "decode compute + communication + host gap",
                       dec.low_s, dec.high_s, 1e3),
        "decode_parts": {"attention_ms": _r(dec.attention_s * 1e3),
                         "weight_gib_read": _r(work.weight_bytes / 2**30),
                         "gemm_tflop": _r(work.flops / 1e12), "gemm_calls": _r(work.gemm_calls),
                         "expert_programs": _r(work.programs), "small_kernels": work.small_kernels,
                         "layers": work.layers},
        "collectives": [c.to_dict() for c in dec.calls],
    }


def _served(n: int, w: Workload, dec: Decode, pre: Ttft, request_s: float, gpus: int) -> dict[str, Any]:
    lo, hi = served_rate(n, w.output_len, dec.high_s, pre.high_s + request_s) / gpus, \
        served_rate(n, w.output_len, dec.low_s, pre.low_s + request_s) / gpus
    return fig((lo + hi) / 2, "derived", f"{n} requests: their prefills ({pre.chunks} chunk(s)) and "
                                         f"{w.output_len:,} decode steps, over {gpus} GPU(s)", lo, hi)


def served_rate(n: int, output_len: int, tpot_s: float, prefill_s: float) -> float:
    """Output tokens a second of n requests in flight: each round is their prefills (prefill_s for all n, with
    the server's time for one request: the others' overlaps the GPU's work) and output_len decode steps of all
    n."""
    return n * output_len / (output_len * tpot_s + prefill_s)


def _label(dcp: int, d: dict[str, Any]) -> str:
    if dcp == 1 or not d:
        return f"dcp {dcp}"
    return f"dcp {dcp} {d['dcp_comm_backend'].value}" + (" +repQ" if d["dcp_replicate_q_proj"].value else "")
