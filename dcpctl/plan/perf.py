"""The full-step performance model of one deployment of the bundled runtime: decode TPOT, TTFT, output tok/s.

    Model.for_request(req, measured) -> the fixed parts (hardware constants, terms, rates) of one plan
    model.decode(req, decisions, batch, context) -> Decode: compute, collectives' band, host gap
    model.prefill(req, input_len, prompts) -> perf_prefill.Ttft (prompts=1: the TTFT)

TPOT = decode compute (perf_work's features x perf_terms' terms, or the measured file's cell) + the step's
collectives (perf_comm: a low-high band, modelled) + the host gap between steps. Every part carries a label
(measured, calibrated, derived, assumed, modelled) and its source; plan/perf_report.py turns them into the
plan's Performance table.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dcpctl.plan import attention_names, attention_table
from dcpctl.plan.cost import Constants
from dcpctl.plan.figures import constants_for
from dcpctl.plan.perf_attention import attention_s
from dcpctl.plan.perf_comm import Call, band_s, step_calls
from dcpctl.plan.perf_measured import Measured
from dcpctl.plan.perf_prefill import PrefillRates, Ttft, prefill, rates
from dcpctl.plan.perf_terms import PerfTable, Terms, perf_table, predict
from dcpctl.plan.perf_work import Ran, StepWork, decode_work, layer_counts, subset
from dcpctl.plan.request import PlanRequest
from dcpctl.plan.weights import weight_format

COMM_SOURCE = "the hardware profile's link and latency (low or high) against NCCL 2.29.2's 8x H200 table"


@dataclass(frozen=True)
class Part:
    """One term of a prediction: seconds, how it was obtained, and from what."""

    seconds: float
    label: str
    source: str


@dataclass(frozen=True)
class Decode:
    compute: Part
    comm_low_s: float
    comm_high_s: float
    host: Part
    attention_s: float          # the attention kernels of the step (inside compute)
    work: StepWork
    calls: list[Call] = field(default_factory=list)

    @property
    def low_s(self) -> float:
        return self.compute.seconds + self.comm_low_s + self.host.seconds

    @property
    def high_s(self) -> float:
        return self.compute.seconds + self.comm_high_s + self.host.seconds

    @property
    def mid_s(self) -> float:
        """The middle of the band: the TPOT figure choices are shown and ranked by."""
        return (self.low_s + self.high_s) / 2


def features(work: StepWork, attention_total_s: float) -> list[float]:
    """The compute model's features of one step (perf_terms' term order)."""
    return [*work.split(), work.gemm_calls, work.programs, float(work.small_kernels), attention_total_s, 1.0]


def choice_of(req: PlanRequest, decisions: dict[str, Any]) -> tuple[int, str, bool]:
    c = req.topology.dcp_size
    return (c, decisions["dcp_comm_backend"].value if c > 1 else "none",
            bool(decisions["dcp_replicate_q_proj"].value))


@dataclass(frozen=True)
class Model:
    k: Constants
    table: PerfTable
    terms: Terms
    rates: PrefillRates
    measured: Measured | None
    measured_choice: Any = None      # the cost.Choice the measured file ran (recommend: perf_recommend)

    def measures(self, choice: Any) -> bool:
        """Whether the measured file's cells are this choice's."""
        return self.measured is not None and choice == self.measured_choice

    @staticmethod
    def for_request(req: PlanRequest, decisions: dict[str, Any], measured: Measured | None = None,
                    calibration: str | None = None) -> "Model":
        """The hardware's constants, the GPU's perf table (or assumed terms) and, with a measured file
        (already checked against this plan and its decisions), the terms fitted on its cells; UnknownFigures /
        UserError when the hardware lacks a figure the model needs."""
        k = constants_for(req.hardware, req.topology.attn_tp, calibration)
        table = perf_table(req.hardware)
        model = Model(k, table, table.decode, rates(req.hardware, table.prefill, table.how), measured)
        if measured is None:
            return model
        terms = measured.calibrate(table.decode,
                                   lambda b, L, ran: features(*model.work(req, decisions, b, L, ran)))
        return Model(k, table, terms, model.rates, measured)

    def work(self, req: PlanRequest, d: dict[str, Any], batch: int, context: int,
             ran: Ran = Ran()) -> tuple[StepWork, float]:
        """The step's work and its attention kernels' seconds; `ran`: how a measured cell differed from the
        deployment (perf_work.Ran)."""
        m, t, hw = req.model, req.topology, req.hardware
        if ran.layers is not None:
            m = subset(m, ran.layers, m.first_k_dense_replace if ran.dense is None else ran.dense)
        c, _, repq = choice_of(req, d)
        # a16 decides only the grouped experts' kernel (perf_grid.few_rows). Under auto the runtime runs w8a16
        # wherever the few-rows kernel could (at most 2 rows an expert: within fp8_parts.PREFILL_ROWS and the
        # H100 fp8_gemm table's 8-row w8a16 bound), its w8a8 rows the MMA kernel as w8a16's would. An engine
        # target's plan has no runtime choice.
        a16 = "fp8_gemm" not in d or d["fp8_gemm"].value != "w8a8"
        work = decode_work(m, t, c, repq, weight_format(m, hw)[0], batch, context, a16, ran.experts)
        kernel = ran.kernel or backend(req, d, batch, work.attention.local_context)
        per_layer, _, _ = attention_s(work.attention, m.kv_row_elems, m.kv_lora_rank,
                                      d["kv_cache_dtype"].value, kernel, _page(d), hw, self.k,
                                      req.attention_table)
        return work, per_layer * work.attention.layers

    def decode(self, req: PlanRequest, d: dict[str, Any], batch: int, context: int,
               measured_ok: bool) -> Decode:
        """One decode step of `batch` rows per attention-DP replica at `context` positions on the busiest
        rank."""
        m, t, hw = req.model, req.topology, req.hardware
        c, be, repq = choice_of(req, d)
        work, attn = self.work(req, d, batch, context)
        compute = Part(max(predict(self.terms, features(work, attn)), 0.0), self.terms.label,
                       self.terms.source)
        host = self._host()
        if self.measured is not None and measured_ok:
            cell = self.measured.compute_s(batch, context)
            if cell is not None:
                compute = Part(cell, "measured",
                               f"{self.measured.path}, cell batch {batch} x context {context:,}")
            if self.measured.host_gap_s is not None:
                host = Part(self.measured.host_gap_s, "measured", f"{self.measured.path}: host_gap_us")
        calls = step_calls(m, t, c, be, repq, batch, layer_counts(m, t.pp_size))
        lo, hi = band_s(calls, hw, t, self.k.coll_latency_s, self.k.link_bytes_per_s)
        return Decode(compute, lo, hi, host, attn, work, calls)

    def _host(self) -> Part:
        gap = self.table.host_gap_s
        if gap is None:
            return Part(0.0, "assumed", f"0: {self.table.host_source}")
        return Part(gap, "calibrated", self.table.host_source)

    def prefill(self, req: PlanRequest, input_len: int, prompts: int = 1) -> Ttft:
        """`prompts` prompts of `input_len` tokens back to back (1: one prompt's time to first token)."""
        m, t, hw = req.model, req.topology, req.hardware
        return prefill(m, t, t.dcp_size, weight_format(m, hw)[0], input_len, req.chunked_prefill_size,
                       self.rates, self.terms.byte_s, hw, self.k.coll_latency_s, self.k.link_bytes_per_s,
                       prompts)


def _page(d: dict[str, Any]) -> int:
    return int((d.get("served_page_size") or d["page_size"]).value)


def backend(req: PlanRequest, d: dict[str, Any], batch: int, local_context: int) -> str:
    """The local attention backend the runtime's rule picks for this cell (plan/attention_table.py)."""
    hw, t = req.hardware, req.topology
    if hw.device != "cuda":
        return attention_names.REFERENCE
    fixed = attention_names.from_flag(req.attention_backend)
    if fixed in attention_names.MEASURED:   # fixed by the user: the runtime runs it where it can
        return fixed
    page = _page(d)
    key = attention_table.Key(req.model.num_heads // t.attn_tp * t.dcp_size,
                              attention_table.KV_NAMES.get(d["kv_cache_dtype"].value,
                                                           d["kv_cache_dtype"].value),
                              page, hw.gpu_name)
    table = attention_table.table_for(hw.gpu_name, hw.sm, req.attention_table)
    rule = attention_table.decide(key, req.attention_backend, attention_table.plan_available(page), table)
    return rule.pick(batch, local_context)

