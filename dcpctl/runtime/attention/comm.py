"""DCP exchanges over one DCP group: query all-gather, `ag_rs` and packed `a2a` output merges.

Kernel heads are the DCP group's query heads in dcp-rank order: rank j's own heads are
[j*Hl, (j+1)*Hl) of the Hk = Hl*c kernel heads.  Each exchange returns this rank's own heads.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch
from torch import Tensor

from dcpctl.runtime.attention.merge import merge_stacked, merge_weights, to_natural, weighted_sum
from dcpctl.runtime.collectives import all_gather_into, all_to_all_into, reduce_scatter_into
from dcpctl.runtime.parallel import Axis


def by_owner(x: Tensor, c: int) -> Tensor:
    # x: [T, Hk, ...] -> [c, T, Hk/c, ...] contiguous: block j holds rank j's heads
    t, hk = x.shape[:2]
    return x.reshape(t, c, hk // c, *x.shape[2:]).transpose(0, 1).contiguous()


def gather_heads(q: Tensor, axis: Axis) -> Tensor:
    # q: [T, Hl, R] -> [T, Hl*c, R], heads in dcp-rank order
    c = axis.size
    out = torch.empty((c, *q.shape), dtype=q.dtype, device=q.device)
    all_gather_into(out, q.contiguous(), axis.group)
    return out.transpose(0, 1).reshape(q.shape[0], c * q.shape[1], q.shape[2])


def exchange_ag_rs(o: Tensor, lse: Tensor, base: str, axis: Axis, rescale: Callable | None = None) -> Tensor:
    # o: [T, Hk, L] acc dtype  lse: [T, Hk] in `base` -> [T, Hk/c, L] merged, acc dtype
    # rescale: fused_merge.rescale_partial (the fused correction on CUDA); None: the torch path
    c = axis.size
    lse_all = torch.empty((c, *lse.shape), dtype=lse.dtype, device=lse.device)
    all_gather_into(lse_all, lse.contiguous(), axis.group)
    w, merged = merge_weights(to_natural(lse_all, base))         # [c, T, Hk], [T, Hk]
    if rescale is not None:
        scaled = rescale(o, lse, merged, base)                   # exp(lse_r - lse) * o_r, masked, fp32
    else:
        scaled = weighted_sum(o.unsqueeze(0), w[axis.rank].unsqueeze(0))
    out = torch.empty((o.shape[0], o.shape[1] // c, o.shape[2]), dtype=scaled.dtype, device=o.device)
    reduce_scatter_into(out, by_owner(scaled, c), axis.group)
    return out


def lse_wire_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def lane_count(dtype: torch.dtype) -> int:
    """Lanes of `dtype` that carry one LSE (2 for 16-bit wires, 1 for fp32/fp64)."""
    return max(1, lse_wire_dtype(dtype).itemsize // dtype.itemsize)


def lanes_in_place(v_dim: int, dtype: torch.dtype) -> bool:
    """Whether the LSE lanes after v_dim values of `dtype` are aligned for a wire-dtype view (false for an
    odd latent width on a 16-bit wire: the lanes then go through copies)."""
    return (v_dim * dtype.itemsize) % lse_wire_dtype(dtype).itemsize == 0


def lane_view(buf: Tensor, v_dim: int, dtype: torch.dtype) -> Tensor:
    # buf: [..., L + k] in dtype -> [...] the LSE lanes read as one wire-dtype value each (a view, no copy)
    wire = lse_wire_dtype(dtype)
    if not lanes_in_place(v_dim, dtype):   # copy the lanes out
        return buf[..., v_dim:].clone(memory_format=torch.contiguous_format).view(wire).squeeze(-1)
    return buf.view(wire)[..., v_dim * dtype.itemsize // wire.itemsize]


class SendBuffer(NamedTuple):
    """The a2a send buffer and the two views a producer writes: block j of dim 0 = rank j's heads."""
    buf: Tensor    # [c, T, Hl, L + k] wire dtype
    o: Tensor      # [c, T, Hl, L] view of buf
    lse: Tensor    # [c, T, Hl] view of buf's LSE lanes, wire LSE dtype


def send_buffer(t: int, hk: int, v_dim: int, c: int, dtype: torch.dtype, device: torch.device) -> SendBuffer:
    """An uninitialised send buffer; the attention kernel writes o and lse straight into its views."""
    if not lanes_in_place(v_dim, dtype):
        raise ValueError(f"LSE lanes in place need v_dim * {dtype.itemsize} bytes ({v_dim * dtype.itemsize}) "
                         f"to be a multiple of {lse_wire_dtype(dtype).itemsize} on a {dtype} wire; use "
                         "pack_by_owner")
    buf = torch.empty((c, t, hk // c, v_dim + lane_count(dtype)), dtype=dtype, device=device)
    return SendBuffer(buf, buf[..., :v_dim], lane_view(buf, v_dim, dtype))


def pack_by_owner(o: Tensor, lse: Tensor, dtype: torch.dtype, c: int) -> Tensor:
    # o: [T, Hk, L]  lse: [T, Hk] -> send buffer [c, T, Hk/c, L + k] in dtype: block j = rank j's heads,
    # k lanes hold the LSE bits (2 for 16-bit); written in place, no concatenated intermediate
    t, hk, v = o.shape
    if not lanes_in_place(v, dtype):    # odd width: lanes through a bit view
        lanes = lse.to(lse_wire_dtype(dtype)).unsqueeze(-1).view(dtype)          # [T, Hk, k]
        send = torch.empty((c, t, hk // c, v + lanes.shape[-1]), dtype=dtype, device=o.device)
        send[..., :v].copy_(o.reshape(t, c, hk // c, v).transpose(0, 1))
        send[..., v:].copy_(lanes.reshape(t, c, hk // c, lanes.shape[-1]).transpose(0, 1))
        return send
    sb = send_buffer(t, hk, v, c, dtype, o.device)
    sb.o.copy_(o.reshape(t, c, hk // c, v).transpose(0, 1))
    sb.lse.copy_(lse.reshape(t, c, hk // c).transpose(0, 1))
    return sb.buf


def unpack(buf: Tensor, v_dim: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    # buf: [..., L + k] in dtype -> (o [..., L], lse [...] in the wire LSE dtype), views where the width
    # allows
    return buf[..., :v_dim], lane_view(buf, v_dim, dtype)


def exchange_packed(send: Tensor, base: str, axis: Axis, dtype: torch.dtype, v_dim: int,
                    merge: Callable | None = None, out_dtype: torch.dtype | None = None) -> Tensor:
    # send: [c, T, Hl, L + k] (pack_by_owner, or written in place through send_buffer) -> [T, Hl, L] merged
    # merge: fused_merge.merge_a2a (one Triton kernel reading the lanes in place); None: the torch merge
    recv = torch.empty_like(send)
    all_to_all_into(recv.view(torch.uint8).view(-1), send.view(torch.uint8).view(-1), axis.group)
    o_parts, lse_parts = unpack(recv, v_dim, dtype)               # [c, T, Hl, L], [c, T, Hl]
    if merge is not None:
        return merge(o_parts, lse_parts, base, out_dtype)[0]
    out = merge_stacked(o_parts, lse_parts, base).o
    return out if out_dtype is None else out.to(out_dtype)


def exchange_a2a(o: Tensor, lse: Tensor, base: str, axis: Axis, dtype: torch.dtype,
                 merge: Callable | None = None, out_dtype: torch.dtype | None = None) -> Tensor:
    # o: [T, Hk, L]  lse: [T, Hk] in `base` -> [T, Hk/c, L] merged (acc dtype unless out_dtype)
    return exchange_packed(pack_by_owner(o, lse, dtype, axis.size), base, axis, dtype, o.shape[-1], merge,
                           out_dtype)
