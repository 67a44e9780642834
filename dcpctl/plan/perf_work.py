"""The work of one rank's decode step, torch-free: the weights it reads, the FLOPs it runs, its kernel counts.

What the bundled runtime's decode step runs on one rank (runtime/models/attention.py, mlp.py; fusions on), for
B = rows of this attention-DP replica, Bm = rows its MLP sees (B * attn_dp: attention DP gathers the replicas'
rows before the MLP), Hl = local heads, Hq = query heads (Hl * dcp under replicated Q), Hk = Hl * dcp:

| GEMM (per layer)     | weight [N, K] on this rank                 | stored as                       |
| -------------------- | ------------------------------------------ | ------------------------------- |
| q_a + kv_a (fused)   | [q_lora + kv_lora + rope, D]               | FP8 where the checkpoint is     |
| q_b                  | [Hq * (nope + rope), q_lora]               | FP8 where the checkpoint is     |
| w_kc, w_vc (bmm)     | Hq x [nope, kv_lora], Hl x [kv_lora, v]    | the compute dtype (dequantized) |
| o_proj               | [D, Hl * v]                                | FP8 where the checkpoint is     |
| dense MLP            | gate+up [2 I / tp, D], down [D, I / tp]     | FP8 where the checkpoint is     |
| MoE router           | [E, D]                                     | fp32                            |
| shared expert        | like a dense MLP of width I_moe * shared   | FP8 where the checkpoint is     |
| routed experts       | d(Bm) experts of E / ep, width I_moe / (tp / ep) each | FP8 where the checkpoint is |
| lm_head (per step)   | [ceil(V / attn_tp), D]                     | the compute dtype               |

Routed experts read only the experts some row chose. Under uniform routing each (token, slot) picks a given
expert with probability k / E whatever the group limit (the top-k_group groups are a uniform draw, then k of
their experts: P(group) * P(expert | group) = k / E), and tokens are independent, so a rank holding E_l
experts reads

    d(Bm) = E_l * (1 - (1 - k / E) ** Bm)      expected distinct experts (tests check it against exhaustive
                                               counts)

and its experts see Bm * k * E_l / E (token, slot) rows. `dcpctl bench rank`'s `uniform` routing is balanced
instead (every expert gets Bm * k / E rows within one: min(E_l, Bm * k * E_l / E) distinct experts); a
measured cell says how it ran (`Ran`: the experts it read, its layers under --layers, its attention kernel),
so that the model is fitted on what ran and predicts a deployment under random routing. The grouped expert
GEMMs also launch programs by the runtime's kernel rule (perf_grid.py). Small kernels (norms, rope, the KV
write, top-k, sort, the combine, the DCP pack and merge) are counted per layer kind for the model's per-kernel
time.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from dcpctl.plan.cost import local_len
from dcpctl.plan.model import ModelSpec
from dcpctl.plan.perf_grid import expert_programs
from dcpctl.plan.topology import Topology
from dcpctl.plan.weights import SCALE_BYTES, dtype_bytes, on_blocks

# small kernels per layer kind in the fused decode step (the runtime's decode layer, fusions on)
SMALL_MLA = 5          # add+norm, q_a norm, KV norm+rope+write, q rope, the value layout
SMALL_DCP = 2          # the query re-layout by heads and the LSE merge (dcp > 1)
SMALL_DENSE = 2        # add+norm, swiglu
SMALL_MOE = 8          # add+norm, router scores, group top-k, top-k, sort by expert, swiglu, combine, shared
                       # swiglu
SMALL_STEP = 4         # embedding, final norm, sampling, the graph's input copies


@dataclass(frozen=True)
class Gemm:
    """One weight's GEMM on this rank, `count` times a step (layers), at `rows` rows."""

    name: str
    count: float
    rows: float
    n: float            # output columns (the routed experts: the seen experts' slices side by side)
    k: int
    elem_bytes: float      # bytes per weight element read (FP8: 1 + its scales)
    programs: float = 0.0  # programs a call launches where they cost beyond the weight (grouped FP8 experts)

    @property
    def bytes(self) -> float:
        return self.count * self.n * self.k * self.elem_bytes

    @property
    def flops(self) -> float:
        return self.count * 2.0 * self.rows * self.n * self.k

    @property
    def fp8(self) -> bool:
        return self.elem_bytes < 2


@dataclass(frozen=True)
class Attention:
    heads: int          # kernel heads: Hl * dcp
    batch: int
    local_context: int  # positions this rank holds of the longest row (the busiest rank: dcp rank 0)
    layers: int


@dataclass(frozen=True)
class StepWork:
    gemms: tuple[Gemm, ...]
    attention: Attention
    small_kernels: int
    layers: int

    @property
    def weight_bytes(self) -> float:
        return sum(g.bytes for g in self.gemms)

    @property
    def flops(self) -> float:
        return sum(g.flops for g in self.gemms)

    def split(self) -> tuple[float, float, float, float]:
        """(FP8 weight bytes, other weight bytes, FLOPs on FP8 weights, other FLOPs)."""
        fp8 = [g for g in self.gemms if g.fp8]
        rest = [g for g in self.gemms if not g.fp8]
        return (sum(g.bytes for g in fp8), sum(g.bytes for g in rest), sum(g.flops for g in fp8),
                sum(g.flops for g in rest))

    @property
    def gemm_calls(self) -> float:
        return sum(g.count for g in self.gemms)

    @property
    def programs(self) -> float:
        return sum(g.count * g.programs for g in self.gemms)


@dataclass(frozen=True)
class Ran:
    """How a measured step ran where it differs from the deployment's (a `dcpctl bench rank` cell); None: as
    deployed."""

    layers: int | None = None       # the model's first `layers` decoder layers (--layers) ...
    dense: int | None = None        # ... `dense` of them with a dense MLP
    experts: float | None = None    # distinct experts each MoE layer read (else: expected under random
                                    # routing)
    kernel: str | None = None       # the local attention kernel it ran (else: the runtime's rule)


def subset(m: ModelSpec, layers: int, dense: int) -> ModelSpec:
    """The model's first `layers` layers, `dense` of them dense, as `bench rank --layers` builds them."""
    return replace(m, num_layers=layers, first_k_dense_replace=dense,
                   mla_layers=tuple(i for i in m.mla_layers if i < layers))


def expected_distinct(local_experts: int, experts: int, top_k: int, rows: float) -> float:
    """Expected experts of a rank's `local_experts` that `rows` tokens choose (uniform routing, any group
    limit)."""
    if experts <= 0 or rows <= 0:
        return 0.0
    return local_experts * (1.0 - (1.0 - top_k / experts) ** rows)


@dataclass(frozen=True)
class Layers:
    mla: int
    dense: int   # layers with a dense MLP
    moe: int
    total: int
    kda: int = 0


def layer_counts(m: ModelSpec, pp: int = 1) -> Layers:
    """Layers of one pipeline stage by kind (the first stage: the largest)."""
    stage = -(-m.num_layers // pp)
    mla_set = set(m.mla_layers)
    mla = sum(1 for i in range(stage) if i in mla_set)
    moe = sum(1 for i in range(stage) if m.n_routed_experts and i >= m.first_k_dense_replace)
    return Layers(mla, stage - moe if m.intermediate_size else 0, moe, stage, stage - mla if m.kda else 0)


class _Bytes:
    """Bytes per element of a weight sliced [rows) x [cols) as the loader keeps it (weights.py's rule)."""

    def __init__(self, m: ModelSpec, fp8: bool):
        self.m, self.fp8 = m, fp8 and m.weight_block is not None
        self.compute = dtype_bytes(m.dtype)

    def of(self, n: int, k: int, n_full: int, k_full: int) -> float:
        if not self.fp8:
            return float(self.compute)
        b0, b1 = self.m.weight_block  # type: ignore[misc]
        if not (on_blocks(0, n, n_full, b0) and on_blocks(0, k, k_full, b1)):
            return float(self.compute)
        return 1.0 + SCALE_BYTES / (b0 * b1)


def _attention_gemms(m: ModelSpec, t: Topology, dcp: int, replicate_q: bool, rows: int, n: int,
                     wb: _Bytes) -> list[Gemm]:
    D, H, L, rope = m.hidden_size, m.num_heads, m.kv_lora_rank, m.qk_rope_head_dim
    hl = H // t.attn_tp
    hq = hl * dcp if replicate_q and dcp > 1 else hl
    qk, v, nope = m.qk_nope_head_dim + rope, m.v_head_dim, m.qk_nope_head_dim
    c = float(wb.compute)
    out = []
    if m.q_lora_rank:
        a = m.q_lora_rank + L + rope
        out += [Gemm("q_a+kv_a", n, rows, a, D, wb.of(a, D, a, D)),
                Gemm("q_b", n, rows, hq * qk, m.q_lora_rank,
                     wb.of(hq * qk, m.q_lora_rank, H * qk, m.q_lora_rank))]
    else:
        out += [Gemm("kv_a", n, rows, L + rope, D, wb.of(L + rope, D, L + rope, D)),
                Gemm("q_proj", n, rows, hq * qk, D, wb.of(hq * qk, D, H * qk, D))]
    return out + [Gemm("w_kc", n, rows, hq * L, nope, c), Gemm("w_vc", n, rows, hl * v, L, c),
                  Gemm("o_proj", n, rows, D, hl * v, wb.of(D, hl * v, D, H * v))]


def _mlp_gemms(name: str, D: int, inter: int, parts: int, n: float, rows: float, wb: _Bytes) -> list[Gemm]:
    w = inter // parts
    return [Gemm(f"{name} gate+up", n, rows, 2 * w, D, wb.of(w, D, inter, D)),
            Gemm(f"{name} down", n, rows, D, w, wb.of(D, w, D, inter))]


def _moe_gemms(m: ModelSpec, t: Topology, n: int, rows: int, wb: _Bytes, a16: bool,
               experts: float | None) -> list[Gemm]:
    E, D, k = m.n_routed_experts, m.hidden_size, m.num_experts_per_tok
    ep = t.ep_size if t.tp_size % t.ep_size == 0 else 1
    local, moe_tp = E // ep, t.tp_size // ep
    router = Gemm("router", n, rows, E, D, 8.0 if m.dtype == "float64" else 4.0)
    seen = expected_distinct(local, E, k, rows) if experts is None else experts
    pairs = rows * k * local / E                      # (token, slot) rows this rank's experts receive
    # the routed experts as one GEMM pair whose weight is the seen experts' slices side by side: bytes d *
    # slice, FLOPs 2 * pairs * slice (count = layers; n spans the seen experts, rows the mean rows per seen
    # expert)
    w = m.moe_intermediate_size // moe_tp
    per = pairs / seen if seen else 0.0
    routed = [Gemm("experts gate+up", n, per, 2 * w * seen, D, wb.of(w, D, m.moe_intermediate_size, D)),
              Gemm("experts down", n, per, D * seen, w, wb.of(D, w, D, m.moe_intermediate_size))]
    # the FP8 grouped GEMMs' programs (16-bit experts run torch's grouped GEMM: no term); their rows are every
    # (token, slot), other ranks' experts' last (runtime/models/mlp.py)
    routed = [replace(g, programs=expert_programs(cols, local, rows * k, a16)) if g.fp8 and seen else g
              for g, cols in zip(routed, (2 * w, D))]
    shared = _mlp_gemms("shared", D, m.moe_intermediate_size * m.n_shared_experts, t.tp_size, n, rows, wb) \
        if m.n_shared_experts else []
    return [router, *routed, *shared]


def decode_work(m: ModelSpec, t: Topology, dcp: int, replicate_q: bool, fp8: bool, batch: int,
                context: int, a16: bool = True, experts: float | None = None) -> StepWork:
    """One decode step of `batch` rows per attention-DP replica at `context` positions, on DCP rank 0 (a16:
    FP8 GEMMs keep 16-bit activations, w8a16; experts: distinct experts each MoE layer reads, None:
    expected)."""
    wb = _Bytes(m, fp8)
    lay = layer_counts(m, t.pp_size)
    rows_mlp = batch * t.attn_dp
    gemms = _attention_gemms(m, t, dcp, replicate_q, batch, lay.mla, wb)
    if lay.kda and m.kda is not None:   # KDA projections (q, k, v, o and gates, as weights.py estimates them)
        inner = m.kda.num_heads * m.kda.head_dim
        gemms.append(Gemm("kda", lay.kda, batch, 4 * inner // t.attn_tp, m.hidden_size, float(wb.compute)))
    if lay.dense:
        gemms += _mlp_gemms("mlp", m.hidden_size, m.intermediate_size, t.tp_size, lay.dense, rows_mlp, wb)
    if lay.moe:
        gemms += _moe_gemms(m, t, lay.moe, rows_mlp, wb, a16, experts)
    vocab = -(-m.vocab_size // t.attn_tp)
    gemms.append(Gemm("lm_head", 1, batch, vocab, m.hidden_size, float(wb.compute)))
    small = lay.mla * (SMALL_MLA + (SMALL_DCP if dcp > 1 else 0)) + lay.dense * SMALL_DENSE \
        + lay.moe * SMALL_MOE + SMALL_STEP
    att = Attention(m.num_heads // t.attn_tp * dcp, batch, local_len(context, dcp), lay.mla)
    return StepWork(tuple(g for g in gemms if g.n and g.k), att, small, lay.total)
