"""FlashInfer's side of `dcpctl bench kernel`: the runtime's backend (flashinfer_mla) timed over ours' pages.

FlashInfer reads the same pool as the runtime does, as strided ckv/kpe views of the fused [pages, 64, 576]
pool, where the cell's block tables stay under its uint32 page-offset limit (the bench pool's first pages
are kept for that: `Pool.perm` starts with pages below the limit).  A cell whose rotation needs more pages
than the limit allows reads separate contiguous ckv/kpe copies (made once) and says so in its row.
Each block table of the rotation gets its own planned wrapper (plan() before capture, as SGLang does).
"""
from __future__ import annotations

import math
from typing import Any, Callable

from dcpctl.runtime.attention.flashinfer_mla import MAX_KV_ELEMENTS, ROWS, WORKSPACE_BYTES, plan_rows
from dcpctl.runtime.attention.flashinfer_setup import load

VIEWS = "strided views of the fused pool (as the runtime)"
COPIES = ("separate ckv/kpe copies (the cell's pages pass FlashInfer's uint32 page-offset limit on the fused "
          "pool)")


def limit_pages(page: int, row: int) -> int:
    """Pages of a fused [pages, page, row] pool that FlashInfer's uint32 offsets reach."""
    return MAX_KV_ELEMENTS // (page * row)


class FlashInferSide:
    """FlashInfer over a bench `Pool` (dcpctl.bench.kernel.Pool); `why` says why not when it cannot run."""

    def __init__(self, pool: Any) -> None:
        import torch
        self.fi, self.why = load()
        self.pool = pool
        self.copies: tuple[Any, Any] | None = None
        if self.fi is not None and pool.kv.dtype != torch.bfloat16:
            self.fi, self.why = None, f"the pool is {pool.kv.dtype} (FlashInfer reads bf16/fp16 here)"
        self.ok = self.fi is not None
        if self.ok:
            self.ws = torch.empty(WORKSPACE_BYTES, dtype=torch.int8, device=pool.kv.device)

    def cache(self, tables: list[Any]) -> tuple[tuple[Any, Any], str]:
        kv, v = self.pool.kv, ROWS[0]
        top = max(int(t.max()) for t in tables) + 1
        if top <= limit_pages(kv.shape[1], kv.shape[2]):
            return (kv[:top, :, :v], kv[:top, :, v:]), VIEWS
        if self.copies is None:
            self.copies = (kv[..., :v].contiguous(), kv[..., v:].contiguous())
        return self.copies, COPIES

    def decode_fns(self, q: Any, tables: list[Any], ctx: int, scale: float) -> tuple[list[Callable], str]:
        # q: [B, H, R]  tables: k block tables [B, ctx/P] -> k planned callables () -> (o [B, H, V], lse base
        # 2)
        import torch
        (ckv, kpe), layout = self.cache(tables)
        b, h = q.shape[:2]
        fns = []
        for bt in tables:
            w = self.fi.mla.BatchMLAPagedAttentionWrapper(self.ws, backend="auto")
            host = bt.cpu().tolist()
            qo, indptr, lens, pages = plan_rows(host, [ctx] * b, b, ckv.shape[1], q.device)
            w.plan(qo_indptr=qo, kv_indptr=indptr, kv_indices=pages, kv_len_arr=lens, num_heads=h,
                   head_dim_ckv=ROWS[0], head_dim_kpe=ROWS[1], page_size=ckv.shape[1], causal=False,
                   sm_scale=scale, q_data_type=q.dtype, kv_data_type=ckv.dtype)
            fns.append(lambda w=w: w.run(q[..., :ROWS[0]], q[..., ROWS[0]:], ckv, kpe, return_lse=True))
        torch.cuda.synchronize()
        return fns, layout

    def check(self, q: Any, bt: Any, ctx: int, scale: float, ours: Any) -> float:
        """Max relative difference of (o, lse) from ours (MLAOut, base e) on one table."""
        fns, _ = self.decode_fns(q, [bt], ctx, scale)
        o, lse2 = fns[0]()
        o_rel = float((o.float() - ours.o.float()).abs().max() / ours.o.float().abs().max())
        lse_rel = float((lse2 * math.log(2) - ours.lse).abs().max() / ours.lse.abs().max())
        return max(o_rel, lse_rel)

    def time(self, heads: int, ctx: int, batch: int, scale: float, roof_us: float,
             preheat_s: float = 0.0) -> dict[str, Any]:
        """The cell's time over its rotation of block tables (a graph replay; eager if run() does not
        capture)."""
        import torch
        from dcpctl.bench.ceilings import rotation_us
        q = torch.randn(batch, heads, self.pool.kv.shape[-1], device=self.pool.kv.device,
                        dtype=torch.bfloat16)
        fns, layout = self.decode_fns(q, self.pool.tables(batch, ctx), ctx, scale)
        us, timing = rotation_us(fns, preheat_s)
        return {"time_us": us, "fraction": roof_us / us, "kv": layout, "timing": timing}
