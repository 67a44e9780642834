"""The collectives of one rank's decode step, and their time as a low-high band (modelled, never measured
here).

    step_calls(m, t, dcp, backend, replicate_q, batch, layers)  -> [Call]: what the bundled runtime runs
    band_s(calls, hw)  -> (low, high, source)

Calls (runtime/models/deepseek.py, attention.py, attention/comm.py), B rows per attention-DP replica,
activations of w bytes on the wire (the model's compute dtype: 2 for bf16 and FP8 checkpoints), `bytes` = this
rank's input of one call (what `dcpctl bench rank` records):

| call                          | kind           | group   | bytes                            | per step   |
| ----------------------------- | -------------- | ------- | -------------------------------- | ---------- |
| embedding                     | all_reduce     | attn_tp | B * D * w                        | 1          |
| o_proj                        | all_reduce     | attn_tp | B * D * w                        | MLA layers |
| DCP query (not replicated Q)  | all_gather     | dcp     | B * Hl * (kv_lora + rope) * w    | MLA layers |
| DCP a2a / fi_a2a exchange     | all_to_all     | dcp     | c * B * Hl * (kv_lora + 4/w) * w | MLA layers |
| DCP ag_rs: LSE, output        | all_gather,    | dcp     | B * Hk * 4, B * Hk * kv_lora * 4 | MLA layers |
|                               | reduce_scatter |         |                                  |            |
| attention DP: rows to the MLP | all_gather     | tp      | B * D * w                        | MLP layers |
| MLP / MoE (EP too: experts'   | all_reduce     | tp      | B * attn_dp * D * w              | MLP layers |
| partial sums)                 |                |         |                                  |            |
| logits                        | all_gather     | attn_tp | B * ceil(V / attn_tp) * w        | 1          |

A call's time is latency + the bytes a rank moves / bandwidth (ring: an all-reduce moves 2 (n-1)/n of the
tensor, an all-gather (n-1) inputs, a reduce-scatter and an all-to-all (n-1)/n of the input). The band's two
ends:
- the hardware profile's figures (`coll_latency_us`, `link_gbps`; a calibration file's where given);
- NCCL 2.29.2's measured times on 8 H200s over NVLink (aiconfigurator,
  `systems/data/h200_sxm/comm/nccl/2.29.2/nccl_perf.parquet`), interpolated in log size, on groups of up to 8
  (their latency bounds a smaller group's from above), bandwidth scaled by the profile's `link_gbps` / 450.
A group that leaves its node without a multi-node NVLink fabric moves its bytes over an assumed 400 Gb/s NIC
per GPU (50 GB/s) at twice the latency. Low is the smaller of the two, high the larger; hardware without a
link figure has the table's alone.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from dcpctl.plan.hardware import Hardware
from dcpctl.plan.model import ModelSpec
from dcpctl.plan.perf_work import Layers
from dcpctl.plan.topology import Topology
from dcpctl.plan.weights import dtype_bytes

H200_LINK_GBPS = 450.0
NIC_GBPS = 50.0     # assumed: one 400 Gb/s NIC per GPU (HGX H100/H200 reference design)
NCCL_SOURCE = "NCCL 2.29.2 on 8x H200 (aiconfigurator systems/data/h200_sxm/comm/nccl/2.29.2)"
# kind -> (total nccl-tests size in bytes, measured time in us), 8 ranks
_KIB, _MIB = 1024, 1024 * 1024
NCCL_H200_8: dict[str, tuple[tuple[int, float], ...]] = {
    "all_gather": ((32 * _KIB, 15), (256 * _KIB, 15), (_MIB, 17), (4 * _MIB, 41), (16 * _MIB, 67),
                   (64 * _MIB, 206), (256 * _MIB, 726)),
    "reduce_scatter": ((32 * _KIB, 12), (256 * _KIB, 13), (_MIB, 14), (4 * _MIB, 30), (16 * _MIB, 69),
                       (64 * _MIB, 199), (256 * _MIB, 716)),
    "all_to_all": ((32 * _KIB, 9), (256 * _KIB, 14), (_MIB, 16), (4 * _MIB, 27), (16 * _MIB, 73),
                   (64 * _MIB, 219), (256 * _MIB, 771)),
    "all_reduce": ((32 * _KIB, 18), (256 * _KIB, 21), (_MIB, 26), (4 * _MIB, 51), (16 * _MIB, 122),
                   (64 * _MIB, 320), (256 * _MIB, 1053)),
}


@dataclass(frozen=True)
class Call:
    kind: str
    group: str
    size: int
    bytes: int
    count: int

    def moved(self) -> float:
        """Bytes this rank sends (= receives) in one call on a ring."""
        n = self.size
        return self.bytes * {"all_reduce": 2 * (n - 1) / n, "all_gather": n - 1}.get(self.kind, (n - 1) / n)

    def nccl_size(self) -> int:
        """The size nccl-tests reports for this call: an all-gather's whole output, else the input."""
        return self.bytes * self.size if self.kind == "all_gather" else self.bytes

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "group": self.group, "group_size": self.size, "bytes": self.bytes,
                "count": self.count}


def step_calls(m: ModelSpec, t: Topology, dcp: int, backend: str, replicate_q: bool, batch: int,
               lay: Layers) -> list[Call]:
    """The collectives of one decode step on DCP rank 0 (groups of one make no call)."""
    D, hl, at, w = m.hidden_size, m.num_heads // t.attn_tp, t.attn_tp, wire_bytes(m)
    row = batch * D * w
    mlp_layers = lay.dense + lay.moe
    calls = [Call("all_reduce", "attn_tp", at, row, 1), Call("all_reduce", "attn_tp", at, row, lay.mla)]
    if dcp > 1:
        calls += _exchange(m, dcp, backend, replicate_q, batch, hl, lay.mla, w)
    if t.attn_dp > 1:
        calls.append(Call("all_gather", "tp", t.tp_size, row, mlp_layers))
    calls.append(Call("all_reduce", "tp", t.tp_size, row * t.attn_dp, mlp_layers))
    calls.append(Call("all_gather", "attn_tp", at, batch * -(-m.vocab_size // at) * w, 1))
    return [c for c in calls if c.size > 1 and c.count > 0 and c.bytes > 0]


def wire_bytes(m: ModelSpec) -> int:
    """Bytes of one activation element on the wire: the model's compute dtype (bf16 for FP8 checkpoints)."""
    return dtype_bytes(m.dtype)


def _exchange(m: ModelSpec, c: int, backend: str, replicate_q: bool, batch: int, hl: int, n: int,
              w: int) -> list[Call]:
    R, Lr, hk = m.kv_row_elems, m.kv_lora_rank, hl * c
    lse = max(w, 4)                  # the LSE travels in fp32 (fp64 on a float64 wire)
    q = [] if replicate_q else [Call("all_gather", "dcp", c, batch * hl * R * w, n)]
    if backend == "ag_rs":
        return q + [Call("all_gather", "dcp", c, batch * hk * lse, n),
                    Call("reduce_scatter", "dcp", c, batch * hk * Lr * lse, n)]
    return q + [Call("all_to_all", "dcp", c, c * batch * hl * (Lr * w + lse), n)]


def _nccl_us(kind: str, size: int, link_scale: float) -> float:
    """The table's time at `size` (log-log between its rows, its last bandwidth past them); the part above its
    smallest time (the latency) divided by `link_scale`."""
    pts = NCCL_H200_8[kind]
    lat = pts[0][1]
    t = pts[-1][1] * size / pts[-1][0]
    for (s0, t0), (s1, t1) in zip(pts, pts[1:]):
        if size <= s1:
            f = max(0.0, (math.log(size) - math.log(s0)) / (math.log(s1) - math.log(s0)))
            t = math.exp((1 - f) * math.log(t0) + f * math.log(t1))
            break
    return lat + (t - lat) / link_scale


def table_s(c: Call, link_scale: float) -> float:
    """NCCL's 8-rank time for the same per-rank input, its bandwidth part scaled to this group's ring
    share."""
    at8 = Call(c.kind, c.group, 8, c.bytes, 1)
    lat = NCCL_H200_8[c.kind][0][1]
    t8 = _nccl_us(c.kind, at8.nccl_size(), link_scale)
    return (lat + (t8 - lat) * c.moved() / at8.moved()) * 1e-6


def call_band_s(c: Call, hw: Hardware, latency_s: float, link_bytes_per_s: float,
                crosses_nodes: bool) -> tuple[float, float]:
    """(low, high) seconds of one call."""
    table = table_s(c, (hw.link_gbps or H200_LINK_GBPS) / H200_LINK_GBPS)
    if crosses_nodes:
        link_bytes_per_s, latency_s = NIC_GBPS * 1e9, 2 * latency_s
        table = max(2 * table, latency_s + c.moved() / link_bytes_per_s)
    if link_bytes_per_s <= 0:       # the hardware gives no link figure (a node without NVLink): the table
                                    # alone
        return table, table
    profile = latency_s + c.moved() / link_bytes_per_s
    return min(profile, table), max(profile, table)


def crosses_nodes(group: str, size: int, t: Topology, hw: Hardware) -> bool:
    """Whether a group of this kind spans nodes with no NVLink fabric between them (groups are contiguous
    ranks)."""
    return not hw.mnnvl and size > (t.gpus_per_node or hw.gpus_per_node)


def band_s(calls: list[Call], hw: Hardware, t: Topology, latency_s: float,
           link_bytes_per_s: float) -> tuple[float, float]:
    """(low, high) seconds of the step's collectives."""
    low = high = 0.0
    for c in calls:
        lo, hi = call_band_s(c, hw, latency_s, link_bytes_per_s, crosses_nodes(c.group, c.size, t, hw))
        low, high = low + lo * c.count, high + hi * c.count
    return low, high
