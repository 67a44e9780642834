"""Roofline cost model of one decode step's MLA attention block, per rank (DESIGN sections 1, 3).

Per MLA layer, B = requests on this attention-DP replica, ctx = local_len(L) on this rank,
Hk = kernel heads = local_heads * dcp, R = kv_lora + rope, Lr = kv_lora, b = KV dtype bytes:

    kv_read     = B * ctx * R * b                         / hbm_bw
    attn_flops  = 2 * B * Hk * ctx * (R + Lr)             / bf16_rate     (MLA decode: compute-heavy)
    attention   = max(kv_read, attn_flops)                (roofline of the local kernel)
    gemms       = max(weight bytes / hbm_bw, flops / bf16_rate) of q_a, q_b, kv_a, w_kc, w_vc, o_proj
                  (q_b and w_kc over Hk heads under replicated Q)
    exchange    = n_collectives * latency + bytes / link_bw       (DESIGN section 3 table)

MLP/MoE time is the same for every DCP size at fixed TP and is left out: the model compares
choices, it does not predict the whole step. Defaults come from the hardware profile; a
calibration file (measured by `dcpctl bench`) replaces them and may add two measured terms:
`attn_efficiency` (the local kernel's fraction of its roofline, from `dcpctl bench kernel`) divides
the attention time, and `layer_overhead_us` (norms, rope, small kernels: the smallest decode cell
of `dcpctl bench decode` minus its prediction) is added per layer.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dcpctl.plan.errors import UserError
from dcpctl.plan.hardware import Hardware
from dcpctl.plan.model import ModelSpec
from dcpctl.plan.memory import KV_DTYPE_BYTES


@dataclass(frozen=True)
class Constants:
    hbm_bytes_per_s: float
    flops_per_s: float
    link_bytes_per_s: float
    coll_latency_s: float
    source: str
    attn_efficiency: float = 1.0   # measured fraction of the attention roofline the kernel reaches
    layer_overhead_s: float = 0.0  # measured per-layer time outside the modelled terms

    @staticmethod
    def from_hardware(hw: Hardware) -> "Constants":
        return Constants(hw.hbm_tbps * 1e12 or 1e11, hw.bf16_tflops * 1e12 or 1e12, hw.link_gbps * 1e9 or 1e10,
                         hw.coll_latency_us * 1e-6, f"hardware profile {hw.name}")


def load_calibration(path: Path, base: Constants) -> Constants:
    """YAML/JSON from `dcpctl bench ... --save-calibration`: copy_tbps, bf16_tflops, link_gbps, a2a_latency_us."""
    from dcpctl.plan.yamlio import read_yaml
    d = read_yaml(path).get("calibration")
    if not isinstance(d, dict):
        raise UserError(f"{path} has no 'calibration' mapping")
    try:
        k = Constants(float(d.get("copy_tbps", base.hbm_bytes_per_s / 1e12)) * 1e12,
                      float(d.get("bf16_tflops", base.flops_per_s / 1e12)) * 1e12,
                      float(d.get("link_gbps", base.link_bytes_per_s / 1e9)) * 1e9,
                      float(d.get("a2a_latency_us", base.coll_latency_s * 1e6)) * 1e-6, f"calibration {path}",
                      float(d.get("attn_efficiency", 1.0)), float(d.get("layer_overhead_us", 0.0)) * 1e-6)
    except (TypeError, ValueError) as e:
        raise UserError(f"{path}: calibration values must be numbers ({e})") from None
    if not 0 < k.attn_efficiency <= 1 or k.layer_overhead_s < 0 or min(k.hbm_bytes_per_s, k.flops_per_s) <= 0:
        raise UserError(f"{path}: need 0 < attn_efficiency <= 1, layer_overhead_us >= 0 and positive rates")
    return k


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

    @property
    def attention_s(self) -> float:
        return max(self.kv_read_s, self.attn_flops_s) / self.efficiency

    @property
    def layer_s(self) -> float:
        return self.attention_s + self.gemm_s + self.exchange_s + self.overhead_s


def local_len(L: int, c: int, r: int = 0) -> int:
    return L // c + (r < L % c)


def layer_cost(m: ModelSpec, attn_tp: int, ch: Choice, batch: int, context: int, kv_dtype: str,
               k: Constants) -> StepCost:
    """Time of one MLA layer's attention block on the busiest rank (dcp rank 0)."""
    b = KV_DTYPE_BYTES.get(kv_dtype, 2)
    R, Lr, c = m.kv_row_elems, m.kv_lora_rank, ch.dcp
    local_heads = m.num_heads // attn_tp
    hk = local_heads * c
    ctx = local_len(context, c)
    kv_read = batch * ctx * R * b / k.hbm_bytes_per_s
    flops = 2.0 * batch * hk * ctx * (R + Lr) / k.flops_per_s
    gemm = _gemm_s(m, local_heads, hk if ch.replicate_q else local_heads, batch, k)
    return StepCost(ch, kv_read, flops, gemm, _exchange_s(ch, batch, hk, R, Lr, k),
                    efficiency=k.attn_efficiency, overhead_s=k.layer_overhead_s)


def _gemm_s(m: ModelSpec, heads: int, q_heads: int, batch: int, k: Constants) -> float:
    """Projection GEMMs of one layer: weight-read bound at small batch, compute bound at large."""
    h, nope, rope, v, Lr = m.hidden_size, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim, m.kv_lora_rank
    q_in = m.q_lora_rank or h
    params = (h * m.q_lora_rank if m.q_lora_rank else 0) + q_in * q_heads * (nope + rope) + h * (Lr + rope) \
        + q_heads * nope * Lr + heads * Lr * v + heads * v * h
    wbytes = params * (1 if m.quantization else 2)
    return max(wbytes / k.hbm_bytes_per_s, 2.0 * batch * params / k.flops_per_s)


def _exchange_s(ch: Choice, batch: int, hk: int, R: int, Lr: int, k: Constants) -> float:
    """Collectives per layer (DESIGN section 3): counts and bytes per rank, 16-bit activations."""
    if ch.dcp == 1:
        return 0.0
    share = (ch.dcp - 1) / ch.dcp
    q_ag = batch * hk * R * 2 * share
    if ch.backend == "ag_rs":
        n, nbytes = 3, q_ag + batch * hk * 4 * share + batch * hk * Lr * 4 * share
    else:
        a2a = batch * hk * (Lr + 2) * 2 * share
        n, nbytes = (1, a2a) if ch.replicate_q else (2, q_ag + a2a)
    return n * k.coll_latency_s + nbytes / k.link_bytes_per_s


def with_bandwidth(k: Constants, factor: float) -> Constants:
    return replace(k, hbm_bytes_per_s=k.hbm_bytes_per_s * factor, link_bytes_per_s=k.link_bytes_per_s * factor)


def to_dict(sc: StepCost, mla_layers: int) -> dict[str, Any]:
    us = 1e6
    return {"choice": sc.choice.label, "dcp": sc.choice.dcp, "backend": sc.choice.backend,
            "replicate_q": sc.choice.replicate_q, "kv_read_us": sc.kv_read_s * us,
            "attn_compute_us": sc.attn_flops_s * us, "gemm_us": sc.gemm_s * us, "exchange_us": sc.exchange_s * us,
            "layer_us": sc.layer_s * us, "step_attention_ms": sc.layer_s * mla_layers * 1e3}
