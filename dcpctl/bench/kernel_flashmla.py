"""FlashMLA's side of `dcpctl bench kernel`: the runtime's backend (runtime.attention.flashmla) over ours'
pages.

FlashMLA reads the bench's fused [pages, 64, 576] pool in place, as the runtime does (`pool.unsqueeze(2)`),
with the same block tables; its tile metadata is made once per table before capture (a device kernel).
"""
from __future__ import annotations

from typing import Any, Callable

from dcpctl.runtime.attention import flashmla


class FlashMLASide:
    """FlashMLA over a bench `Pool` (dcpctl.bench.kernel.Pool); `why` says why not when it cannot run."""

    name = "flashmla"

    def __init__(self, pool: Any) -> None:
        import torch
        self.pool = pool
        self.why = flashmla.blocker(pool.kv, flashmla.ROWS[0], torch.bfloat16)
        self.ok = self.why is None
        if self.ok:
            self.why = flashmla.load()[1]

    def decode_fns(self, q: Any, tables: list[Any], ctx: int, scale: float) -> list[Callable]:
        # q: [B, H, R]  tables: k block tables [B, ctx/P] -> k callables () -> (o [B, H, V], lse [B, H] base
        # e)
        import torch
        lens = torch.full((q.shape[0],), ctx, dtype=torch.int32, device=q.device)
        rows = flashmla.decode_rows(lens, q.shape[1])      # every table has the same lengths: one metadata
        fns = [lambda bt=bt: flashmla.run(q, self.pool.kv, bt, rows, scale, flashmla.ROWS[0])
               for bt in tables]
        torch.cuda.synchronize()
        return fns

    def check(self, q: Any, bt: Any, ctx: int, scale: float, ours: Any) -> float:
        """Max relative difference of (o, lse) from ours (MLAOut, base e) on one table."""
        o, lse = self.decode_fns(q, [bt], ctx, scale)[0]()
        o_rel = float((o.float() - ours.o.float()).abs().max() / ours.o.float().abs().max())
        return max(o_rel, float((lse - ours.lse).abs().max() / ours.lse.abs().max()))

    def time(self, heads: int, ctx: int, batch: int, scale: float, roof_us: float,
             preheat_s: float = 0.0) -> dict[str, Any]:
        """The cell's time over its rotation of block tables (a graph replay; eager if it does not
        capture)."""
        import torch
        from dcpctl.bench.ceilings import rotation_us
        q = torch.randn(batch, heads, self.pool.kv.shape[-1], device=self.pool.kv.device,
                        dtype=torch.bfloat16)
        us, timing = rotation_us(self.decode_fns(q, self.pool.tables(batch, ctx), ctx, scale), preheat_s)
        return {"time_us": us, "fraction": roof_us / us, "kv": "the fused pool in place", "timing": timing}
