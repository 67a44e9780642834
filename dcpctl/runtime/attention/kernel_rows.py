"""Which local KV rows a query row sees: one Triton helper that both MLA decode kernels call (the Triton
split kernel in triton_mla and the Gluon one in gluon_mla), so the DCP visibility rule is written once.

    visible_range(ROWREQ, QPOS, LENS, n, sp, nsplit, BLOCK_N, dcp_rank, dcp_size) -> (b, start, end)

Local row j of rank r holds global position j*c + r, so query row n (request b = ROWREQ[n], global
position QPOS[n]) sees nvis = min(LENS[b], (QPOS[n] - r + c) // c) local rows; split sp of nsplit covers
[sp*chunk, sp*chunk + chunk) of them, chunk = nvis / nsplit rounded up to whole BLOCK_N tiles.  The chunk is
the row's own, not one sized for the batch's widest row: a CUDA graph sizes its splits for its context
bucket (often 2x the real widest row, more below the smallest bucket), and a shared chunk left splits empty
while the others each streamed that many more rows.  start >= end means this split sees nothing.
"""
from __future__ import annotations

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU CI without triton: the torch reference path only
    triton = None

if triton is not None:
    @triton.jit
    def visible_range(ROWREQ, QPOS, LENS, n, sp, nsplit, BLOCK_N: tl.constexpr, dcp_rank, dcp_size):
        b = tl.load(ROWREQ + n)
        causal = tl.maximum((tl.load(QPOS + n) - dcp_rank + dcp_size) // dcp_size, 0)
        nvis = tl.minimum(tl.load(LENS + b), causal)
        chunk = tl.cdiv(tl.cdiv(nvis, nsplit), BLOCK_N) * BLOCK_N
        start = sp * chunk
        return b, start, tl.minimum(start + chunk, nvis)
