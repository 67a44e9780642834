"""MHA-form local attention over one rank's latent shard: up-project key blocks per head, attend, merge by
LSE.

The absorbed form attends the latent rows as they are (R = 576 / L = 512 wide per head); the MHA form
up-projects each latent row per head with kv_b_proj (K nope and V) and attends 192 / 128 wide, which is
~3.4x fewer attention FLOPs once enough queries see each row (a long prefill or extend; form.py decides).

One chunk of T new tokens at positions [start, end) attends this rank's shard rows j = 0 .. n-1
(global position j*c + r; the cached prefix rows, then the chunk's own owned rows), in key blocks of at
most `block` rows, each up-projected once (the transient is one block, never the whole shard):

| key block                     | query rows that see it                                       | call   |
| ----------------------------- | ------------------------------------------------------------ | ------ |
| prefix rows (pos < start)     | all T                                                        | full   |
| new rows j0..j1-1             | rows at pos > pos(j1-1): the suffix [hi, T)                  | full   |
| new rows j0..j1-1             | rows at pos(j0) + d + c*t <= pos(j1-1), phase d = 0..c-1:    | causal |
|                               | row t sees keys j0..j0+t (a square lower triangle)           |        |

So every call is either unmasked or a square causal triangle, which every kernel aligns the same way,
and no rank attends a key another rank owns: the chunk's own causal part is split by key ownership
(docs/design.md section 4). Partials merge online in the accumulation dtype with the exact LSE identity.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from dcpctl.runtime.attention import fused_merge, mha_keys, selector
from dcpctl.runtime.attention.backends import Kernel
from dcpctl.runtime.attention.backends.mha_cudnn import KEY_QUANTUM
from dcpctl.runtime.attention.merge import acc_dtype

from dcpctl.plan.memory import MHA_BLOCK_BYTES as BLOCK_BYTES   # one key block's up-projected K/V, at most


def block_rows(heads: int, qk_dim: int, nope: int, v_dim: int, elem_bytes: int, budget: int = BLOCK_BYTES,
               quantum: int = KEY_QUANTUM) -> int:
    """Key rows per block so that one block's up-projection (K nope | V GEMM output, then K) fits in `budget`;
    a multiple of `quantum` when at least one fits, so a whole prefix block is one cuDNN call
    (backends/mha_cudnn)."""
    rows = max(1, budget // (heads * (nope + v_dim + qk_dim) * elem_bytes))
    return rows - rows % quantum if rows >= quantum else rows


def merge_into(acc_o: Tensor, acc_lse: Tensor, o: Tensor, lse: Tensor, fresh: bool = False) -> None:
    # acc_o: [t, H, V] acc dtype (views allowed)  acc_lse: [t, H] natural; o, lse: a partial whose every row
    # saw a key
    # lse' = logaddexp(lse_acc, lse);  o' = exp(lse_acc - lse') o_acc + exp(lse - lse') o
    # (-inf acc weighs 0)
    # fresh: no partial reached these rows yet (acc is 0 / -inf): the merge is a copy
    if fresh:
        acc_o.copy_(o)
        acc_lse.copy_(lse)
        return
    fused_merge.merge_into(acc_o, acc_lse, o, lse)


def chunk_blocks(prefix: int, total: int, block: int) -> list[tuple[int, int]]:
    """Key blocks [j0, j1) over shard rows [0, total), split where the prefix (rows < prefix) ends."""
    cuts = list(range(0, prefix, block)) + list(range(prefix, total, block)) + [total]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


def chunk_attention(q: Tensor, rows_of: Callable[[int, int], Tensor], w_kv: Tensor, nope: int, latent: int,
                    start: int, n_prefix: int, n_rows: int, rank: int, c: int, scale: float, kernel: Kernel,
                    block: int, acc_o: Tensor, acc_lse: Tensor) -> None:
    """One chunk's MHA-form attention over this rank's shard, accumulated into (acc_o, acc_lse).

    q: [T, H, nope + rope] the chunk's queries (positions start .. start+T-1); rows_of(j0, j1): latent rows
    [j1 - j0, R] of shard rows j0..j1-1 (position j*c + rank); n_prefix shard rows lie before start, n_rows
    in all; acc_o [T, H, v] / acc_lse [T, H] start at 0 / -inf."""
    T = q.shape[0]
    pos = lambda j: j * c + rank            # noqa: E731
    for i, (j0, j1) in enumerate(chunk_blocks(n_prefix, n_rows, block)):
        # the first block's calls reach disjoint rows no earlier call reached: copies, not merges
        k, v = _keys(rows_of(j0, j1), w_kv, nope, latent)
        hi = max(0, pos(j1 - 1) + 1 - start)   # rows from hi on see the whole block (and lie past it)
        if hi < T:
            merge_into(acc_o[hi:], acc_lse[hi:], *kernel(q[hi:], k, v, False, scale), fresh=i == 0)
        if j0 < n_prefix:
            continue
        lo = pos(j0) - start
        for d in range(min(c, max(0, hi - lo))):
            sl = slice(lo + d, hi, c)
            m = len(range(lo + d, hi, c))
            merge_into(acc_o[sl], acc_lse[sl], *kernel(q[sl].contiguous(), k[:m], v[:m], True, scale),
                       fresh=i == 0)


def _keys(rows: Tensor, w_kv: Tensor, nope: int, latent: int) -> tuple[Tensor, Tensor]:
    # rows: [s, R]  w_kv: [H, nope + v, L] -> k [s, H, nope + rope], v [s, H, v] (a strided view of the GEMM
    # output)
    h, nv, _ = w_kv.shape
    rows = rows.to(w_kv.dtype)
    kv = (rows[:, :latent] @ w_kv.reshape(h * nv, latent).t()).view(rows.shape[0], h, nv)
    return mha_keys.keys(kv, rows[:, latent:], nope), kv[..., nope:]



@dataclass
class ShardChunk:
    """One chunk as the MHA form reads it on one rank (the context builds it from its layout)."""

    row: int           # first batch row of the chunk
    num_tokens: int    # T
    start: int         # global position of its first token
    n_prefix: int      # shard rows before start: local_len(start)
    n_rows: int        # shard rows up to the chunk's end: local_len(start + T)
    slots: Tensor      # [n_rows] int64 pool slots of shard rows 0 .. n_rows-1


def shard_attention(q: Tensor, kv_layer: Tensor, chunks: list[ShardChunk], w_kv: Tensor, latent: int,
                    rank: int, c: int, scale: float, budget: int = BLOCK_BYTES) -> tuple[Tensor, Tensor]:
    # q: [T', Hk, qk] (T' >= the chunks' rows: pads see nothing)  kv_layer: [C, R] one layer of the pool
    # w_kv: [Hk, nope + v, L] -> o [T', Hk, v] acc dtype (q's dtype when one call covers it all), lse [T', Hk]
    # base e (-inf where a row sees no key)
    hk, nv = w_kv.shape[:2]
    nope = q.shape[-1] - (kv_layer.shape[-1] - latent)
    kernel = selector.mha(q, kv_layer, latent).run
    block = block_rows(hk, q.shape[-1], nope, nv - nope, q.element_size(), budget)
    one = chunks[0] if len(chunks) == 1 else None
    if (c == 1 and one is not None and one.n_prefix == 0 and one.n_rows <= block
        and q.shape[0] == one.num_tokens):
        # a fresh prompt in one key block: a single causal call covers every row, so it is the result as it
        # comes
        return kernel(q, *_keys(kv_layer.index_select(0, one.slots), w_kv, nope, latent), True, scale)
    dt = acc_dtype(q.dtype)
    acc_o = torch.zeros(q.shape[0], hk, nv - nope, dtype=dt, device=q.device)
    acc_lse = torch.full(q.shape[:2], -torch.inf, dtype=dt, device=q.device)
    for ch in chunks:
        rows = slice(ch.row, ch.row + ch.num_tokens)
        rows_of = lambda j0, j1, s=ch.slots: kv_layer.index_select(0, s[j0:j1])   # noqa: E731
        chunk_attention(q[rows], rows_of, w_kv, nope, latent, ch.start, ch.n_prefix, ch.n_rows, rank, c,
                        scale, kernel, block, acc_o[rows], acc_lse[rows])
    return acc_o, acc_lse
