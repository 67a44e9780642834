"""The decode compute model's terms: assumed, read from the GPU's perf table, or fitted to measured cells.

One rank's decode compute is linear in nine terms (perf_work.StepWork gives the features); FP8 and 16-bit
weights have terms of their own (the FP8 GEMM converts its tiles in registers: another rate per byte and per
row):

    compute = fp8_byte_s * FP8 weight bytes read + byte_s * other weight bytes read
              + fp8_flop_s * FLOPs on FP8 weights + flop_s * other GEMM FLOPs + gemm_s * GEMM calls
              + prog_s * programs of the grouped FP8 expert GEMMs (perf_grid.py)
              + small_s * small kernels + attn_scale * attention kernels (perf_attention) + step_s

Assumed values (a GPU with no perf table): aiconfigurator's H200 rule, memory bandwidth x 0.8 + 3 us per
operation (ai-dynamo/aiconfigurator `systems/h200_sxm.yaml`), GEMM FLOPs at the profile's bf16 rate, attention
as timed, no time per program (the rule has none).
`fit` solves the terms by least squares on relative error, pulled toward a prior (the assumed or the table's
values) with weight `PULL` so that terms a set of cells cannot tell apart (a fixed model's GEMM calls and
small kernels change together) stay near it (a prior of 0 pulls nothing); no term goes below zero.

The perf table (dcpctl/tuning/perf, the GPU's file by dcpctl.tuning's device rule; `python -m
benchmarks.perf_accuracy --save-table FILE` writes it) holds `decode` (these terms, with the cells they were
fitted on), `host_gap_us` and `prefill` (plan/perf_prefill.py).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable

from dcpctl import tuning
from dcpctl.plan.errors import UserError
from dcpctl.plan.hardware import Hardware

AIC_SOURCE = ("aiconfigurator's H200 rule: memory bandwidth x 0.8 + 3 us per operation "
              "(ai-dynamo/aiconfigurator systems/h200_sxm.yaml)")
AIC_BANDWIDTH, AIC_OP_S = 0.8, 3e-6
PULL = 0.1           # weight of the prior: a term 100% off it costs as much as one cell 10% off
NAMES = ("fp8_byte_s", "byte_s", "fp8_flop_s", "flop_s", "gemm_s", "prog_s", "small_s", "attn_scale",
         "step_s")
UNITS = {"fp8_byte_s": ("fp8_ps_per_byte", 1e12), "byte_s": ("ps_per_byte", 1e12),
         "fp8_flop_s": ("fp8_fs_per_flop", 1e15), "flop_s": ("fs_per_flop", 1e15), "gemm_s": ("gemm_us", 1e6),
         "prog_s": ("program_ns", 1e9), "small_s": ("small_us", 1e6), "attn_scale": ("attn_scale", 1.0),
         "step_s": ("step_us", 1e6)}


@dataclass(frozen=True)
class Terms:
    fp8_byte_s: float
    byte_s: float
    fp8_flop_s: float
    flop_s: float
    gemm_s: float
    prog_s: float
    small_s: float
    attn_scale: float
    step_s: float
    label: str = "assumed"       # assumed | calibrated
    source: str = AIC_SOURCE

    def values(self) -> list[float]:
        return [getattr(self, n) for n in NAMES]

    def with_values(self, vals: Iterable[float], label: str, source: str) -> "Terms":
        return replace(self, **dict(zip(NAMES, vals)), label=label, source=source)

    def to_table(self) -> dict[str, float]:
        """The perf table's `decode` units (ps per byte, fs per FLOP, us)."""
        return {UNITS[n][0]: round(getattr(self, n) * UNITS[n][1], 4) for n in NAMES}


def assumed(hw: Hardware) -> Terms:
    """aiconfigurator's rule on the profile's figures."""
    if not hw.hbm_tbps or not hw.bf16_tflops:
        raise UserError(f"the hardware {hw.name} has no memory bandwidth or bf16 rate, so the performance "
                        "model has nothing to assume from: pass --hardware with a profile or YAML file that "
                        "has them")
    byte_s, flop_s = 1 / (AIC_BANDWIDTH * hw.hbm_tbps * 1e12), 1 / (hw.bf16_tflops * 1e12)
    return Terms(byte_s, byte_s, flop_s, flop_s, gemm_s=AIC_OP_S, prog_s=0.0, small_s=AIC_OP_S,
                 attn_scale=1.0,
                 step_s=AIC_OP_S)  # step_s: the graph launch


def from_table(row: dict[str, Any], base: Terms, source: str) -> Terms:
    """Terms from a perf table's `decode` mapping (units as `Terms.to_table`)."""
    try:
        vals = [float(row[UNITS[n][0]]) / UNITS[n][1] for n in NAMES]
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"{source}: the perf table's decode terms lack {e}") from None
    return base.with_values(vals, "calibrated", source)


@dataclass(frozen=True)
class PerfTable:
    decode: Terms
    host_gap_s: float | None
    host_source: str
    prefill: dict[str, Any]
    how: str


def perf_table(hw: Hardware) -> PerfTable:
    """The GPU's perf table (tuning kind `perf`), or the assumed terms when no table applies."""
    base = assumed(hw)
    t = tuning.load("perf", hw.gpu_name, hw.sm or None) if hw.device == "cuda" else None
    if t is None or t.data is None or not tuning.same_gpu(t.device or "", hw.gpu_name):
        how = t.how if t is not None else "no GPU"
        return PerfTable(base, None, f"no measured host gap for {hw.gpu_name}", {}, how)
    src = f"the perf table: {t.how}"
    d = t.data
    gap = d.get("host_gap_us")
    return PerfTable(from_table(d["decode"], base, f"{src}; fitted on {d['decode'].get('fitted_on', '?')}"),
                     None if gap is None else gap * 1e-6, f"{src}; {d.get('host_gap_from', '')}".rstrip("; "),
                     d.get("prefill", {}), t.how)


def predict(terms: Terms, x: list[float]) -> float:
    return sum(a * b for a, b in zip(terms.values(), x))


def fit(rows: list[tuple[list[float], float]], prior: Terms, source: str) -> Terms:
    """Terms from (features, measured seconds) rows (solve_relative)."""
    if not rows:
        raise UserError(f"{source}: no cells to fit the performance model on")
    return prior.with_values(solve_relative(rows, prior.values()), "calibrated", source)


def solve_relative(rows: list[tuple[list[float], float]], prior: list[float]) -> list[float]:
    """x minimising sum ((rows' features . x - y) / y)^2 + PULL^2 * sum ((x_i - p_i) / p_i)^2 with x >= 0 (a
    term the solve drives negative is held at 0 and the rest solved again); a prior of 0 pulls nothing."""
    free = list(range(len(prior)))
    vals = list(prior)
    for _ in range(len(prior)):
        vals = _solve(rows, prior, free)
        neg = [i for i in free if vals[i] < 0]
        if not neg:
            break
        free = [i for i in free if i not in neg]
    return [max(v, 0.0) if i in free else 0.0 for i, v in enumerate(vals)]


def _solve(rows: list[tuple[list[float], float]], prior: list[float], free: list[int]) -> list[float]:
    # in units of the prior (u_i = x_i / p_i), so that every column of the normal equations is of order one; a
    # term of prior 0 in units that make its column's relative entries one on average
    scale = [p if p else _unit(rows, i) for i, p in enumerate(prior)]
    n = len(free)
    a = [[0.0] * n for _ in range(n)]
    b = [0.0] * n
    for x, y in rows:
        xs = [x[f] * scale[f] / y for f in free]
        for i in range(n):
            b[i] += xs[i]
            for j in range(n):
                a[i][j] += xs[i] * xs[j]
    for i, f in enumerate(free):
        w = PULL if prior[f] else 0.0
        a[i][i] += w * w + 1e-12
        b[i] += w * w
    sol = _gauss(a, b)
    out = [0.0] * len(prior)
    for i, f in enumerate(free):
        out[f] = sol[i] * scale[f]
    return out


def _unit(rows: list[tuple[list[float], float]], i: int) -> float:
    mean = sum(abs(x[i] / y) for x, y in rows) / len(rows)
    return 1.0 / mean if mean else 1.0


def _gauss(a: list[list[float]], b: list[float]) -> list[float]:
    n = len(b)
    for i in range(n):
        piv = max(range(i, n), key=lambda r: abs(a[r][i]))
        a[i], a[piv], b[i], b[piv] = a[piv], a[i], b[piv], b[i]
        for r in range(n):
            if r != i and a[i][i]:
                f = a[r][i] / a[i][i]
                a[r] = [u - f * v for u, v in zip(a[r], a[i])]
                b[r] -= f * b[i]
    return [b[i] / a[i][i] if a[i][i] else 0.0 for i in range(n)]
