"""Roofline cost model of one decode step's MLA attention block, per rank (docs/design.md sections 1, 3).

Per MLA layer, B = requests on this attention-DP replica, ctx = local_len(L) on this rank,
Hk = kernel heads = local_heads * dcp, R = kv_lora + rope, Lr = kv_lora, b = KV dtype bytes:

    kv_read     = B * ctx * R * b                         / hbm_bw
    q_o         = B * Hk * (R + Lr) * 2                   / hbm_bw  (query in, latent output out)
    attn_flops  = 2 * B * Hk * ctx * (R + Lr)             / bf16_rate     (MLA decode: compute-heavy)
    attention   = attn_fixed + max(kv_read + q_o, attn_flops) / efficiency(Hk)
    gemms       = max(weight bytes / hbm_bw, flops / bf16_rate) of q_a, q_b, kv_a, w_kc, w_vc, o_proj
                  (q_b and w_kc over Hk heads under replicated Q)
    exchange    = the DCP collectives (docs/design.md section 3 table), each latency + bytes / bandwidth;
                  the gathered query is also re-laid out by heads (one copy)
    tp_reduce   = the o_proj all-reduce over attention TP: latency + 2 (t-1)/t * B * hidden * 2 / link

The attention roofline counts the same bytes and FLOPs as `dcpctl bench kernel`, so its measured
fractions apply as they are. MLP/MoE time is the same for every DCP size at fixed TP and is left
out (`dense_mlp_s` prices a dense MLP for benchmarks that run one). Defaults come from the
hardware profile; a calibration file (dcpctl/plan/calibrate.py fits it from `dcpctl bench`
documents) replaces them and may add measured terms: `attn_efficiency` (the kernel's fraction of
its roofline: one number, or a table by kernel heads interpolated in log2(heads)), `attn_fixed_us`
(per kernel call), `a2a_latency_us` + `a2a_gbps` (the a2a exchange as the decode step runs it in a
CUDA graph, per send-buffer byte), `coll_latency_us` + `link_gbps` (a plain collective in a CUDA
graph, per byte received) and `layer_overhead_us` (norms, rope, small kernels) added per layer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dcpctl.plan.errors import UserError
from dcpctl.plan.hardware import FIGURES, Hardware
from dcpctl.plan.model import DTYPE_BYTES, ModelSpec

ACT_BYTES = 2  # 16-bit activations on the wire and in the kernel's q / o


@dataclass(frozen=True)
class Constants:
    hbm_bytes_per_s: float
    flops_per_s: float
    link_bytes_per_s: float
    coll_latency_s: float
    source: str
    attn_efficiency: float = 1.0   # measured fraction of the attention roofline the kernel reaches
    layer_overhead_s: float = 0.0  # measured per-layer time outside the modelled terms
    efficiency_by_heads: tuple[tuple[int, float], ...] = ()  # (kernel heads, fraction); replaces the scalar
    attn_fixed_s: float = 0.0      # per kernel call (launch, split reduction): small batches are latency
                                   # bound
    a2a_latency_s: float | None = None    # packed a2a exchange; None: a plain collective
    a2a_bytes_per_s: float | None = None  # per send-buffer byte; None: received bytes over the link
    sources: tuple[tuple[str, str], ...] = ()  # (hardware figure, where its value came from)

    @staticmethod
    def from_hardware(hw: Hardware) -> "Constants":
        """The hardware's figures as they are: an unknown one stays 0 (`require` refuses to price with it)."""
        return Constants(hw.hbm_tbps * 1e12, hw.bf16_tflops * 1e12, hw.link_gbps * 1e9,
                         hw.coll_latency_us * 1e-6, _summary(hw.figures, f"hardware {hw.name}"),
                         sources=hw.figures)

    def efficiency(self, heads: int) -> float:
        return (interpolate_log2(self.efficiency_by_heads, heads)
                if self.efficiency_by_heads else self.attn_efficiency)


def _summary(sources: tuple[tuple[str, str], ...], default: str) -> str:
    """Where the known figures came from, each source once ("profile h200-8, nvml: 18 active NVLinks ...")."""
    return ", ".join(dict.fromkeys(s for _, s in sources if not s.startswith("unknown"))) or default


def interpolate_log2(table: tuple[tuple[int, float], ...], x: float) -> float:
    """Piecewise linear in log2(x) through sorted (x, y) points; the end values outside them."""
    pts = sorted(table)
    if x <= pts[0][0]:
        return pts[0][1]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x <= x1:
            t = (math.log2(x) - math.log2(x0)) / (math.log2(x1) - math.log2(x0))
            return (1 - t) * y0 + t * y1
    return pts[-1][1]


# key -> (Constants field, scale to SI); attn_efficiency is parsed on its own (a number or a table)
_KEYS = {"copy_tbps": ("hbm_bytes_per_s", 1e12), "bf16_tflops": ("flops_per_s", 1e12),
         "link_gbps": ("link_bytes_per_s", 1e9), "coll_latency_us": ("coll_latency_s", 1e-6),
         "a2a_latency_us": ("a2a_latency_s", 1e-6), "a2a_gbps": ("a2a_bytes_per_s", 1e9),
         "attn_fixed_us": ("attn_fixed_s", 1e-6), "layer_overhead_us": ("layer_overhead_s", 1e-6)}
CALIBRATION_KEYS = sorted([*_KEYS, "attn_efficiency"])
_FIGURE = {"copy_tbps": "hbm_tbps"}  # calibration key -> the hardware figure it measures (others: the same
                                     # name)


def load_calibration(path: Path, base: Constants) -> Constants:
    """YAML/JSON `calibration:` mapping (keys: CALIBRATION_KEYS; see the module docstring)."""
    from dcpctl.plan.yamlio import read_yaml
    d = read_yaml(path).get("calibration")
    if not isinstance(d, dict):
        raise UserError(f"{path} has no 'calibration' mapping")
    unknown = sorted(str(key) for key in d if key not in CALIBRATION_KEYS)
    if unknown:
        raise UserError(f"{path}: unknown calibration key(s) {unknown}; valid: {CALIBRATION_KEYS}")
    try:
        vals = {_KEYS[key][0]: float(v) * _KEYS[key][1] for key, v in d.items() if key in _KEYS}
    except (TypeError, ValueError) as e:
        raise UserError(f"{path}: calibration values must be numbers ({e})") from None
    if "a2a_latency_us" in d and "coll_latency_us" not in d:  # files before coll_latency_us: one latency for
                                                              # all
        vals["coll_latency_s"] = vals["a2a_latency_s"]
    if any(v < 0 or math.isnan(v) for v in vals.values()) or \
            any(vals.get(f, 1) <= 0
                for f in ("hbm_bytes_per_s", "flops_per_s", "link_bytes_per_s", "a2a_bytes_per_s")):
        raise UserError(f"{path}: calibration rates must be positive and times must be >= 0")
    measured_only = {"attn_efficiency": 1.0, "layer_overhead_s": 0.0, "efficiency_by_heads": (),
                     "attn_fixed_s": 0.0,
                     "a2a_latency_s": None, "a2a_bytes_per_s": None}  # not inherited from the profile
    measured = {_FIGURE.get(key, key) for key in d} | ({"coll_latency_us"}
                                                       if "a2a_latency_us" in d else set())
    before = dict(base.sources)
    sources = tuple((f, f"calibration {path}" if f in measured else before.get(f, "unknown"))
                    for f in FIGURES)
    k = replace(base, **{**measured_only, **vals, "source": _summary(sources, f"calibration {path}"),
                         "sources": sources})
    return _with_efficiency(k, d.get("attn_efficiency", 1.0), path)


def _with_efficiency(k: Constants, eff: Any, path: Path) -> Constants:
    # eff: a number, or {kernel heads: fraction}; every fraction in (0, 1]
    try:
        if isinstance(eff, dict):
            pairs = tuple(sorted((_heads(h), float(f)) for h, f in eff.items()))
        else:
            pairs = ((0, float(eff)),)
    except (TypeError, ValueError):
        pairs = ()
    if not pairs or not all(0 < f <= 1 for _, f in pairs):
        raise UserError(f"{path}: need 0 < attn_efficiency <= 1, as a number or a mapping of kernel heads "
                        f"(positive integers) to fractions, got {eff!r}")
    if not isinstance(eff, dict):
        return replace(k, attn_efficiency=pairs[0][1])
    return replace(k, efficiency_by_heads=pairs)


def _heads(h: Any) -> int:
    n = int(h)
    if isinstance(h, bool) or n <= 0 or n != float(h):
        raise ValueError(h)
    return n


@dataclass(frozen=True)
class Choice:
    dcp: int
    backend: str  # ag_rs | a2a | fi_a2a (dcp 1: none)
    replicate_q: bool

    @property
    def label(self) -> str:
        if self.dcp == 1:
            return "dcp 1"
        return f"dcp {self.dcp} {self.backend}" + (" +repQ" if self.replicate_q else "")


@dataclass(frozen=True)
class StepCost:
    choice: Choice
    kv_read_s: float
    attn_flops_s: float
    gemm_s: float
    exchange_s: float

    efficiency: float = 1.0
    overhead_s: float = 0.0
    q_o_s: float = 0.0          # the kernel's query reads and output writes
    attn_fixed_s: float = 0.0
    tp_reduce_s: float = 0.0

    @property
    def attention_s(self) -> float:
        return self.attn_fixed_s + max(self.kv_read_s + self.q_o_s, self.attn_flops_s) / self.efficiency

    @property
    def layer_s(self) -> float:
        return self.attention_s + self.gemm_s + self.exchange_s + self.tp_reduce_s + self.overhead_s


def local_len(L: int, c: int, r: int = 0) -> int:
    """Positions of an `L`-long sequence that DCP rank `r` of `c` stores (docs/design.md section 1)."""
    return L // c + (r < L % c)


def layer_cost(m: ModelSpec, attn_tp: int, ch: Choice, batch: int, context: int, kv_dtype: str,
               k: Constants) -> StepCost:
    """Time of one MLA layer's attention block on the busiest rank (dcp rank 0)."""
    b = DTYPE_BYTES.get(kv_dtype, 2)
    R, Lr, c = m.kv_row_elems, m.kv_lora_rank, ch.dcp
    local_heads = m.num_heads // attn_tp
    hk = local_heads * c
    ctx = local_len(context, c)
    kv_read = batch * ctx * R * b / k.hbm_bytes_per_s
    q_o = batch * hk * (R + Lr) * ACT_BYTES / k.hbm_bytes_per_s
    flops = 2.0 * batch * hk * ctx * (R + Lr) / k.flops_per_s
    gemm = _gemm_s(m, local_heads, hk if ch.replicate_q else local_heads, batch, k)
    return StepCost(ch, kv_read, flops, gemm, _exchange_s(ch, batch, hk, R, Lr, k),
                    efficiency=k.efficiency(hk), overhead_s=k.layer_overhead_s, q_o_s=q_o,
                    attn_fixed_s=k.attn_fixed_s,
                    tp_reduce_s=all_reduce_s(attn_tp, batch * m.hidden_size * ACT_BYTES, k))


def _gemm_s(m: ModelSpec, heads: int, q_heads: int, batch: int, k: Constants) -> float:
    """Projection GEMMs of one layer: weight-read bound at small batch, compute bound at large."""
    h, nope, rope, v, Lr = m.hidden_size, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim, m.kv_lora_rank
    q_in = m.q_lora_rank or h
    params = (h * m.q_lora_rank if m.q_lora_rank else 0) + q_in * q_heads * (nope + rope) + h * (Lr + rope) \
        + q_heads * nope * Lr + heads * Lr * v + heads * v * h
    wbytes = params * (1 if m.quantization else 2)
    return max(wbytes / k.hbm_bytes_per_s, 2.0 * batch * params / k.flops_per_s)


def collective_s(received_bytes: float, k: Constants) -> float:
    """One plain collective inside a captured step: latency + bytes this rank receives / link."""
    return k.coll_latency_s + received_bytes / k.link_bytes_per_s


def all_reduce_s(ranks: int, nbytes: float, k: Constants) -> float:
    """Ring all-reduce of nbytes over `ranks` (each rank receives 2 (n-1)/n of it); 0 for one rank."""
    return collective_s(2 * (ranks - 1) / ranks * nbytes, k) if ranks > 1 else 0.0


def dense_mlp_s(hidden: int, inter: int, tp: int, batch: int, k: Constants) -> float:
    """A dense gate/up/down MLP of width inter / tp per rank, plus its all-reduce over TP."""
    params = 3 * hidden * (inter // tp)
    gemm = max(params * 2 / k.hbm_bytes_per_s, 2.0 * batch * params / k.flops_per_s)
    return gemm + all_reduce_s(tp, batch * hidden * ACT_BYTES, k)


def _exchange_s(ch: Choice, batch: int, hk: int, R: int, Lr: int, k: Constants) -> float:
    """Collectives per layer (docs/design.md section 3): counts and bytes per rank, 16-bit activations."""
    if ch.dcp == 1:
        return 0.0
    share = (ch.dcp - 1) / ch.dcp
    q_bytes = batch * hk * R * ACT_BYTES
    q_gather = collective_s(q_bytes * share, k) + 2 * q_bytes / k.hbm_bytes_per_s  # + re-layout by heads
    if ch.backend == "ag_rs":
        # all-gather of every rank's fp32 LSE over its Hk kernel heads (c - 1 of them received), then the
        # reduce-scatter of the rescaled fp32 o (a (c - 1)/c share of it moves)
        # (replicated Q, vLLM only: SGLang refuses it with ag_rs, skips the query all-gather as with a2a)
        return (0.0 if ch.replicate_q else q_gather) + collective_s(batch * hk * 4 * (ch.dcp - 1), k) + \
            collective_s(batch * hk * Lr * 4 * share, k)
    send = batch * hk * (Lr + 2) * ACT_BYTES   # o plus the fp32 LSE in two 16-bit lanes
    if k.a2a_bytes_per_s is not None:
        a2a = (k.coll_latency_s if k.a2a_latency_s is None else k.a2a_latency_s) + send / k.a2a_bytes_per_s
    else:
        a2a = collective_s(send * share, k)
    return a2a if ch.replicate_q else q_gather + a2a


def with_bandwidth(k: Constants, factor: float) -> Constants:
    scale = lambda v: None if v is None else v * factor  # noqa: E731
    return replace(k, hbm_bytes_per_s=k.hbm_bytes_per_s * factor,
                   link_bytes_per_s=k.link_bytes_per_s * factor, a2a_bytes_per_s=scale(k.a2a_bytes_per_s))


def to_dict(sc: StepCost, mla_layers: int) -> dict[str, Any]:
    us = 1e6
    return {"choice": sc.choice.label, "dcp": sc.choice.dcp, "backend": sc.choice.backend,
            "replicate_q": sc.choice.replicate_q, "kv_read_us": sc.kv_read_s * us,
            "attn_compute_us": sc.attn_flops_s * us, "attention_us": sc.attention_s * us,
            "gemm_us": sc.gemm_s * us, "exchange_us": sc.exchange_s * us, "tp_reduce_us": sc.tp_reduce_s * us,
            "layer_us": sc.layer_s * us, "step_attention_ms": sc.layer_s * mla_layers * 1e3}
