"""Weight bytes one rank holds after the bundled runtime's load: the loader's shard plan, torch-free.

    weight_bytes(m, t, replicate_q, fp8) -> int       the largest over the attention-TP ranks
    weight_format(m, hw) -> (fp8 kept, reason)

Mirrors runtime/models/shards.py (which slice a rank reads) and loader.py (what it keeps):

| tensor                 | slice of this rank                        | stored as                             |
| ---------------------- | ----------------------------------------- | ------------------------------------- |
| q_a, kv_a (replicated) | whole                                     | FP8 + scales, or the compute dtype    |
| q_b / q_proj rows      | q heads (the DCP group's under rep. Q)    | FP8 + scales, or the compute dtype    |
| kv_b_proj              | q heads; the DCP group's heads (MHA form) | w_kc [Hq, nope, L] + w_vc [Hl, L, v]  |
|                        |                                           | + w_kv [Hl*dcp, nope+v, L], compute   |
|                        |                                           | dtype                                 |
| o_proj columns         | local heads                               | FP8 + scales, or the compute dtype    |
| dense / shared MLP     | intermediate / tp                         | FP8 + scales, or the compute dtype    |
| routed experts         | experts / ep, intermediate / (tp / ep)    | FP8 + scales, or the compute dtype    |
| router (+ noaux bias)  | whole                                     | fp32 (float64 for float64 models)     |
| embed, lm_head         | ceil(V / attn_tp) rows                    | the compute dtype                     |

An FP8 weight stays FP8 only where its slice starts and ends on scale-block boundaries (else the
runtime dequantizes that one weight). KDA layers (Kimi Linear) are never quantized and are estimated.
"""
from __future__ import annotations

from dataclasses import dataclass

from dcpctl.plan.hardware import Hardware
from dcpctl.plan.model import DTYPE_BYTES, ModelSpec
from dcpctl.plan.topology import Topology

SCALE_BYTES = 4  # one fp32 weight_scale_inv per block
FP8_MIN_SM = 89  # e4m3 tensor cores


def dtype_bytes(dtype: str) -> int:
    return DTYPE_BYTES.get(dtype, 2)


def fp8_block_ok(block: tuple[int, int]) -> bool:
    """Whether the FP8 GEMM takes these weight blocks: its K tile is one block column, a power of two >=
    16."""
    return block[1] >= 16 and block[1] & (block[1] - 1) == 0


def weight_format(m: ModelSpec, hw: Hardware) -> tuple[bool, str]:
    """Whether a block-FP8 checkpoint's linear layers stay FP8 on this hardware, and why (the runtime's
    runtime/models/quant.fp8_compute asks the same of the GPU it finds)."""
    if m.weight_block is None:
        return False, "weights are not block-FP8"
    if not fp8_block_ok(m.weight_block):
        return False, (f"weight blocks {m.weight_block[0]}x{m.weight_block[1]}: the FP8 GEMM needs a "
                       f"power-of-two block width >= 16, so block-FP8 weights are dequantized to {m.dtype} "
                       "at load")
    if hw.device != "cuda" or (hw.sm or 0) < FP8_MIN_SM:
        where = "CPU" if hw.device != "cuda" else f"sm_{hw.sm}"
        return False, f"{where} has no FP8 GEMM: block-FP8 weights are dequantized to {m.dtype} at load"
    b0, b1 = m.weight_block
    return True, f"FP8 ({b0}x{b1} blocks) on sm_{hw.sm}; kv_b_proj dequantized for absorbed MLA"


@dataclass(frozen=True)
class _Rank:
    tp_rank: int
    attn_tp_rank: int
    dcp_rank: int


class _Count:
    def __init__(self, m: ModelSpec, fp8: bool):
        self.m, self.fp8 = m, fp8 and m.weight_block is not None and fp8_block_ok(m.weight_block)
        self.compute = dtype_bytes(m.dtype)
        self.total = 0

    def plain(self, elems: int, nbytes: int | None = None) -> None:
        self.total += elems * (self.compute if nbytes is None else nbytes)

    def linear(self, rows: tuple[int, int], cols: tuple[int, int], full: tuple[int, int]) -> None:
        # one weight's slice [r0, r1) x [c0, c1) of a [full rows, full cols] matrix
        (r0, r1), (c0, c1) = rows, cols
        n = (r1 - r0) * (c1 - c0)
        if not self.fp8 or not (on_blocks(r0, r1, full[0], self.m.weight_block[0])
                                and on_blocks(c0, c1, full[1], self.m.weight_block[1])):
            self.plain(n)
            return
        b0, b1 = self.m.weight_block
        scales = (-(-r1 // b0) - r0 // b0) * (-(-c1 // b1) - c0 // b1)
        self.total += n + scales * SCALE_BYTES


def on_blocks(start: int, end: int, full: int, block: int) -> bool:
    """Whether the slice [start, end) of a dimension of `full` starts and ends on a block boundary (the
    loader keeps such a slice FP8, runtime/models/checkpoint.py)."""
    return start % block == 0 and (end % block == 0 or end == full)


def _attention(c: _Count, t: Topology, r: _Rank, replicate_q: bool) -> None:
    m = c.m
    D, H, L = m.hidden_size, m.num_heads, m.kv_lora_rank
    qk, hl = m.qk_nope_head_dim + m.qk_rope_head_dim, H // t.attn_tp
    h0 = r.attn_tp_rank * hl
    group = replicate_q and t.dcp_size > 1
    q0, hq = ((r.attn_tp_rank - r.dcp_rank) * hl, hl * t.dcp_size) if group else (h0, hl)
    c.linear((0, L + m.qk_rope_head_dim), (0, D), (L + m.qk_rope_head_dim, D))     # kv_a_proj_with_mqa
    c.plain(L)                                                                      # kv_a_layernorm
    c.plain(hq * m.qk_nope_head_dim * L + hl * L * m.v_head_dim)                    # w_kc + w_vc
    c.plain(hl * t.dcp_size * (m.qk_nope_head_dim + m.v_head_dim) * L)              # w_kv (MHA-form prefill)
    c.linear((0, D), (h0 * m.v_head_dim, (h0 + hl) * m.v_head_dim), (D, H * m.v_head_dim))   # o_proj
    q_in = m.q_lora_rank or D
    if m.q_lora_rank:
        c.linear((0, q_in), (0, D), (q_in, D))                                      # q_a_proj
        c.plain(q_in)                                                               # q_a_layernorm
    c.linear((q0 * qk, (q0 + hq) * qk), (0, q_in), (H * qk, q_in))                  # q_b_proj / q_proj


def _mlp(c: _Count, inter: int, parts: int, idx: int) -> None:
    D, size = c.m.hidden_size, inter // parts
    a, b = idx * size, (idx + 1) * size
    c.linear((a, b), (0, D), (inter, D))   # gate_proj
    c.linear((a, b), (0, D), (inter, D))   # up_proj
    c.linear((0, D), (a, b), (D, inter))   # down_proj


def _moe(c: _Count, t: Topology, r: _Rank) -> None:
    m = c.m
    E, upcast = m.n_routed_experts, 8 if m.dtype == "float64" else 4
    c.plain(E * m.hidden_size, upcast)                                              # router
    if m.extra.get("config", {}).get("topk_method") == "noaux_tc":
        c.plain(E, upcast)                                                          # e_score_correction_bias
    ep = t.ep_size if t.tp_size % t.ep_size == 0 else 1
    moe_tp = t.tp_size // ep
    one = _Count(m, c.fp8)
    _mlp(one, m.moe_intermediate_size, moe_tp, r.tp_rank % moe_tp)
    c.total += one.total * (E // ep)                                                # this rank's experts
    if m.n_shared_experts:
        _mlp(c, m.moe_intermediate_size * m.n_shared_experts, t.tp_size, r.tp_rank)


def _kda_params(m: ModelSpec) -> int:
    assert m.kda is not None
    inner = m.kda.num_heads * m.kda.head_dim
    return 4 * m.hidden_size * inner + 3 * inner * m.kda.conv_kernel  # q, k, v, o (+ gates ~ o) and convs


def _layer_bytes(m: ModelSpec, t: Topology, r: _Rank, replicate_q: bool, fp8: bool, mla: bool,
                 moe: bool) -> int:
    c = _Count(m, fp8)
    c.plain(2 * m.hidden_size)                                                      # the two layer norms
    if mla:
        _attention(c, t, r, replicate_q)
    else:
        c.plain(_kda_params(m) // t.attn_tp)
    if moe:
        _moe(c, t, r)
    elif m.intermediate_size:
        _mlp(c, m.intermediate_size, t.tp_size, r.tp_rank)
    return c.total


def _rank_bytes(m: ModelSpec, t: Topology, r: _Rank, replicate_q: bool, fp8: bool) -> int:
    stage = -(-m.num_layers // t.pp_size)
    mla_layers = set(m.mla_layers) if m.kda is not None else set(range(m.num_layers))
    kinds: dict[tuple[bool, bool], int] = {}
    for layer in range(stage):
        kind = (layer in mla_layers, bool(m.n_routed_experts) and layer >= m.first_k_dense_replace)
        kinds[kind] = kinds.get(kind, 0) + 1
    total = sum(n * _layer_bytes(m, t, r, replicate_q, fp8, *kind) for kind, n in kinds.items())
    D, vp = m.hidden_size, -(-m.vocab_size // t.attn_tp)
    rows = max(0, min(vp, m.vocab_size - r.attn_tp_rank * vp))
    tied = bool(m.extra.get("config", {}).get("tie_word_embeddings"))
    return total + (rows * D * (1 if tied else 2) + D) * dtype_bytes(m.dtype)      # embed, lm_head, norm


def weight_bytes(m: ModelSpec, t: Topology, replicate_q: bool, fp8: bool) -> int:
    """Bytes of weights one rank holds: the largest over the ranks of a TP group (slices differ only in
    whether they start on scale-block boundaries and in the last vocabulary rows)."""
    ranks = {_Rank(i, i % t.attn_tp, (i % t.attn_tp) % t.dcp_size) for i in range(t.tp_size)}
    return max(_rank_bytes(m, t, r, replicate_q, fp8) for r in ranks)
