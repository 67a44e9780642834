"""cuBLAS meets the prefill GEMMs before ready: the warm-up records the model's GEMMs, then runs each over a
grid of token counts M (up to the largest M it saw).

Why: cuBLAS picks a kernel per range of M and loads it on first use.  After a warm-up of a few prompt lengths,
a prompt of a length no request had can take twice its steady time when its M falls in a range not met yet
(the projection GEMMs and the absorbed-MLA bmm's).  The grid below shortens that, not to nothing.

    with recording() as log: <the warm-up's prefills>   each linear() / bmm_into() notes its weight and layout
    log.warm(ms)                                         every noted GEMM once per M of `ms` up to its largest

Only plain (16-bit) weights are noted (the engine records on CUDA only): the block-FP8 GEMM is a Triton kernel
of ours, compiled per specialization before the warm-up (fp8_precompile.py) for the prompt-length ladder it
meets.  Calls that bypass quant.linear (Kimi's KDA projections) are not recorded.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import Tensor

LOG: "GemmLog | None" = None    # set while recording (engine warm-up only)


class GemmLog:
    """Distinct GEMMs seen, each with the largest M it ran at: linear weights by (shape, strides, dtype,
    device), bmm's by weight and operand strides."""

    def __init__(self) -> None:
        # key -> (what to run, the largest M seen): a linear's weight; a bmm's (weight, x strides, out
        # strides)
        self.linears: dict[tuple, tuple[Tensor, int]] = {}
        self.bmms: dict[tuple, tuple[tuple[Tensor, tuple[int, ...], tuple[int, ...]], int]] = {}

    @staticmethod
    def _keep(table: dict, key: tuple, item: object, m: int) -> None:
        # the first item seen for key, with the largest M seen for it
        old = table.get(key)
        table[key] = (item, m) if old is None else (old[0], max(old[1], m))

    def note_linear(self, x: Tensor, w: Tensor) -> None:
        if x.dim() == 2 and x.is_contiguous():
            self._keep(self.linears, (tuple(w.shape), w.stride(), w.dtype, w.device, x.dtype), w, x.shape[0])

    def note_bmm(self, x: Tensor, w: Tensor, out: Tensor) -> None:
        # x: [B, M, K]  w: [B, K, N]  out: [B, M, N] as token-major views (rows of M apart by whole heads),
        # the layout whose strides do not depend on M; any other layout is not warmed
        if not (x.stride(1) >= x.stride(0) * x.shape[0] and out.stride(1) >= out.stride(0) * out.shape[0]):
            return
        key = (tuple(w.shape), w.stride(), w.dtype, w.device, x.stride(0), x.stride(1), out.stride(0),
               out.stride(1))
        self._keep(self.bmms, key, (w, (x.stride(0), x.stride(1), 1), (out.stride(0), out.stride(1), 1)),
                   x.shape[1])

    def __len__(self) -> int:
        return len(self.linears) + len(self.bmms)

    def warm(self, ms: list[int]) -> int:
        """Run every noted GEMM once per M of `ms` up to the largest M it was seen at (zeros in, results
        dropped); returns the calls made."""
        calls = 0
        for w, top in self.linears.values():
            for m in (m for m in ms if m <= top):
                torch.nn.functional.linear(torch.zeros(m, w.shape[-1], dtype=w.dtype, device=w.device), w)
                calls += 1
        for (w, xs, os_), top in self.bmms.values():
            b, k, n = w.shape
            for m in (m for m in ms if m <= top):
                x = torch.empty_strided((b, m, k), xs, dtype=w.dtype, device=w.device).zero_()
                torch.bmm(x, w, out=torch.empty_strided((b, m, n), os_, dtype=w.dtype, device=w.device))
                calls += 1
        weights = [w for w, _ in self.linears.values()] + [b[0] for b, _ in self.bmms.values()]
        if calls and any(w.is_cuda for w in weights):
            torch.cuda.synchronize()
        return calls


def warm_ms(top: int) -> list[int]:
    """Token counts to warm up to `top` (the largest a GEMM can meet: the prefill chunk, times the
    attention-DP replicas for the MLP): 1-15, every 16 up to 1024, every 64 up to 4096, every 256 beyond, and
    `top` itself."""
    ms = (list(range(1, 16)) + list(range(16, min(top, 1024) + 1, 16))
          + list(range(1088, min(top, 4096) + 1, 64)) + list(range(4352, top + 1, 256)))
    return sorted(set([m for m in ms if m <= top] + [top]))


@contextlib.contextmanager
def recording() -> Iterator[GemmLog]:
    global LOG
    LOG = GemmLog()
    try:
        yield LOG
    finally:
        LOG = None


def bmm_into(x: Tensor, w: Tensor, out: Tensor, heads_kernel: bool = False) -> None:
    """torch.bmm(x, w, out=out), noted while recording; heads_kernel: decode rows (M <= 64) on CUDA go through
    head_bmm_triton instead (the `head_bmm` fusion)."""
    if heads_kernel:
        from dcpctl.runtime.kernels.head_bmm_triton import head_bmm, head_bmm_ok
        if head_bmm_ok(x, w, out):
            head_bmm(x, w, out)
            return
    if LOG is not None:
        LOG.note_bmm(x, w, out)
    torch.bmm(x, w, out=out)
