"""Time to first token of one prompt alone: MHA-form prefill in chunks, compute and collectives, torch-free.

A prompt of I tokens runs in chunks of C (the chunked-prefill size); chunk j covers positions [s, s + n). Per
MLA layer and chunk, on one rank (Hl local heads, Hk = Hl * dcp kernel heads, c = dcp; form.py's MHA form):

    GEMMs       q_a + kv_a, q_b, o_proj, the MLP (dense; or the router, shared expert and the k routed experts
                each row picks, E_l / E of them on this rank) at n rows: 2 * n * weight elements
    up-project  this rank's stripe of the s + n latent rows through kv_b for Hk heads:
                2 * (s+n)/c * Hk * (nope+v) * L
    attention   n * (s + (n+1)/2) / c query-key pairs per head over Hk heads: 2 * (nope + rope + v) FLOPs each
    weights     the chunk's weights are read once (the routed experts some row chose)

    chunk time  = 16-bit GEMM and up-projection FLOPs / gemm rate + FLOPs on FP8 weights * fp8_flop_s
                  + attention FLOPs / attention rate + FP8 weight bytes * fp8_byte_s
                  + other weight bytes * byte_s + layer_s per layer + chunk_s

FP8 weights cost per chunk as well as per row (fp8_byte_s, per FP8 weight byte). What the chunk does with them
depends on the runtime's fp8_gemm setting, which this model does not read: under --fp8-gemm w8a16 dense GEMMs
of more than 128 rows dequantize their weight for cuBLAS bf16 (runtime/kernels/fp8_tiles.py
PREFILL_DEQUANT_ROWS) and block-FP8 experts of passes past 512 tokens run one expert at a time, dequantized,
through cuBLAS (runtime/models/mlp.py GROUPED_MAX_TOKENS), so each chunk reads and rewrites them; under auto
(the default) and w8a8, GEMMs of more than 64 rows (fp8_parts.PREFILL_ROWS; per expert when grouped) quantize
their activations to e4m3 and run cuBLAS's block-scaled FP8 GEMM (dense) or the Triton w8a8 kernel, or a
per-expert loop through cuBLAS (experts, where the GPU's fp8_gemm table says so: fp8_tiles.method), which read
the e4m3 weight once a chunk and dequantize nothing. The perf table's fp8_gemm_tflops and fp8_ps_per_byte
describe whichever method the GPU's FP8 TTFT cells ran (benchmarks/perf_accuracy.py fits them on
fp8_prefill_ttft_TAG.json: the H200's ran w8a16, before auto; a GPU without the file keeps the fit's prior,
the 16-bit floor's rate and 3 x byte_s, as the H100's table does).
A served request also pays the server's own work (HTTP, tokens in and out, admission): request_s.

Collectives per chunk (perf_comm's band): the o_proj and MLP all-reduces of n * D rows, and with DCP the query
all-gather (n * Hl * (nope + rope)) and the output all-to-all (c * n * Hl * (v + 2)) per MLA layer.

Rates and fixed times come from the GPU's perf table (`prefill`: measured by benchmarks/prefill_ttft.py and
benchmarks/fp8_gemm.py, fitted by benchmarks/perf_accuracy.py), else the profile's bf16 rate and
aiconfigurator's 3 us per operation (assumed).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dcpctl.plan.cost import local_len
from dcpctl.plan.hardware import Hardware
from dcpctl.plan.model import ModelSpec
from dcpctl.plan.perf_comm import Call, band_s, wire_bytes
from dcpctl.plan.perf_terms import AIC_OP_S, AIC_SOURCE
from dcpctl.plan.perf_work import Layers, decode_work, layer_counts
from dcpctl.plan.topology import Topology

RATE_KEYS = ("attn_tflops", "gemm_tflops", "fp8_gemm_tflops", "fp8_ps_per_byte", "layer_us", "chunk_us",
             "request_us")


@dataclass(frozen=True)
class PrefillRates:
    attn_flops_s: float      # attention FLOPs per second (the MHA-form kernel)
    gemm_flops_s: float      # 16-bit GEMMs
    fp8_gemm_flops_s: float  # GEMMs on block-FP8 weights at prefill rows
    fp8_byte_s: float        # per FP8 weight byte, once a chunk
    layer_s: float           # per layer and chunk (norms, rope, key assembly, launches)
    chunk_s: float           # per chunk (host work, the step's metadata, sampling)
    request_s: float         # per served request (the server's HTTP and token work)
    label: str
    source: str

    def to_table(self) -> dict[str, float]:
        vals = (self.attn_flops_s / 1e12, self.gemm_flops_s / 1e12, self.fp8_gemm_flops_s / 1e12,
                self.fp8_byte_s * 1e12, self.layer_s * 1e6, self.chunk_s * 1e6, self.request_s * 1e6)
        return {k: float(f"{v:.4g}") for k, v in zip(RATE_KEYS, vals)}


def rates(hw: Hardware, table: dict[str, Any], how: str) -> PrefillRates:
    """The perf table's `prefill` rates, else assumed ones."""
    if table and all(isinstance(table.get(k), (int, float)) for k in RATE_KEYS):
        t = table
        return PrefillRates(t["attn_tflops"] * 1e12, t["gemm_tflops"] * 1e12, t["fp8_gemm_tflops"] * 1e12,
                            t["fp8_ps_per_byte"] * 1e-12, t["layer_us"] * 1e-6, t["chunk_us"] * 1e-6,
                            t["request_us"] * 1e-6, "calibrated",
                            f"the perf table: {how}; {t.get('fitted_on', '')}".rstrip("; "))
    bf16 = hw.bf16_tflops * 1e12
    return PrefillRates(bf16, bf16, bf16, 0.0, 6 * AIC_OP_S, 4 * AIC_OP_S, 0.0, "assumed",
                        f"the profile's bf16 rate for attention and GEMMs; {AIC_SOURCE}")


@dataclass(frozen=True)
class Chunk:
    gemm_flops: float
    fp8_flops: float
    attn_flops: float
    fp8_bytes: float
    weight_bytes: float      # the other weights
    layers: int

    def seconds(self, r: PrefillRates, byte_s: float) -> float:
        return self.gemm_flops / r.gemm_flops_s + self.fp8_flops / r.fp8_gemm_flops_s \
            + self.attn_flops / r.attn_flops_s + self.fp8_bytes * r.fp8_byte_s + self.weight_bytes * byte_s \
            + self.layers * r.layer_s + r.chunk_s


def chunk_work(m: ModelSpec, t: Topology, dcp: int, fp8: bool, start: int, n: int) -> Chunk:
    """The compute of one chunk of n tokens after `start` cached positions, one rank, all layers of its
    stage."""
    work = decode_work(m, t, dcp, False, fp8, n, start + n)
    # absorbed-form bmms, logits
    gemms = [g for g in work.gemms if g.name not in ("w_kc", "w_vc", "lm_head")]
    bf16 = sum(g.flops for g in gemms if not g.fp8)
    fp8f = sum(g.flops for g in gemms if g.fp8)
    lay = work.attention.layers
    hk, L = work.attention.heads, m.kv_lora_rank
    nope, rope, v = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim
    up = 2.0 * local_len(start + n, dcp) * hk * (nope + v) * L * lay
    pairs = n * (start + (n + 1) / 2) / dcp
    attn = 2.0 * pairs * hk * (nope + rope + v) * lay
    return Chunk(bf16 + up, fp8f, attn, sum(g.bytes for g in gemms if g.fp8),
                 sum(g.bytes for g in gemms if not g.fp8), work.layers)


def chunk_calls(m: ModelSpec, t: Topology, dcp: int, n: int, lay: Layers) -> list[Call]:
    D, hl, w = m.hidden_size, m.num_heads // t.attn_tp, wire_bytes(m)
    row = n * D * w
    calls = [Call("all_reduce", "attn_tp", t.attn_tp, row, lay.mla + 1),
             Call("all_reduce", "tp", t.tp_size, row, lay.dense + lay.moe)]
    if dcp > 1:
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        calls += [Call("all_gather", "dcp", dcp, n * hl * qk * w, lay.mla),
                  Call("all_to_all", "dcp", dcp, dcp * n * hl * (m.v_head_dim * w + max(w, 4)), lay.mla)]
    return [c for c in calls if c.size > 1 and c.count > 0]


def chunks(input_len: int, chunk: int) -> list[tuple[int, int]]:
    """(start, tokens) of each chunk of one prompt; chunk <= 0: one chunk."""
    size = chunk if chunk > 0 else input_len
    return [(s, min(size, input_len - s)) for s in range(0, input_len, size)]


@dataclass(frozen=True)
class Ttft:
    compute_s: float
    comm_low_s: float
    comm_high_s: float
    chunks: int

    @property
    def low_s(self) -> float:
        return self.compute_s + self.comm_low_s

    @property
    def high_s(self) -> float:
        return self.compute_s + self.comm_high_s

    @property
    def mid_s(self) -> float:
        """The middle of the band: the TTFT figure shown."""
        return (self.low_s + self.high_s) / 2


def prefill(m: ModelSpec, t: Topology, dcp: int, fp8: bool, input_len: int, chunk: int, r: PrefillRates,
            byte_s: float, hw: Hardware, latency_s: float, link_bytes_per_s: float, prompts: int = 1) -> Ttft:
    """`prompts` prompts of `input_len` tokens prefilled back to back (1: one prompt's TTFT on an idle
    server). Their FLOPs add up; a chunk's fixed costs (weights read, per-layer and per-chunk times, the
    collectives' latency) are paid once per chunk, and prompts shorter than a chunk share chunks."""
    lay = layer_counts(m, t.pp_size)
    no_fixed = PrefillRates(r.attn_flops_s, r.gemm_flops_s, r.fp8_gemm_flops_s, 0.0, 0.0, 0.0, 0.0, "", "")
    flop_s = sum(chunk_work(m, t, dcp, fp8, start, n).seconds(no_fixed, 0.0)
                 for start, n in chunks(input_len, chunk))
    size = chunk if chunk > 0 else input_len * prompts
    total = input_len * prompts
    count = -(-total // size) if input_len <= size else prompts * len(chunks(input_len, chunk))
    rows = min(size, total)
    w = chunk_work(m, t, dcp, fp8, 0, rows)
    fixed = w.seconds(r, byte_s) - w.seconds(no_fixed, 0.0)
    lo, hi = band_s(chunk_calls(m, t, dcp, rows, lay), hw, t, latency_s, link_bytes_per_s)  # a full chunk's
    return Ttft(prompts * flop_s + count * fixed, count * lo, count * hi, count)
