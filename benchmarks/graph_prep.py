"""Host time of DecodeGraphs.prepare per decode step: the old full block-table rebuild vs DeviceBlockTable.

CPU only, no model: a stub embedding and a tiny pool (prepare never touches the pool), so the time
is the host prep (buffers are CPU tensors here, so the copies are memcpys, not H2D transfers).
`old` is the previous prepare, kept verbatim below for the comparison.  Scenarios per DCP size:

  cold    the first step (the new table writes every row whole, as the old one does every step)
  steady  B requests decoding together at `context` (all cross a page boundary every P*c steps)
  churn   every step one request in the middle of the batch ends and a new one joins at the end

    OMP_NUM_THREADS=1 python benchmarks/graph_prep.py --batch 64 --context 131072 --page 64 --dcp 1,2
"""
from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace

import torch

from dcpctl.runtime.attention.graphs import DecodeGraphs
from dcpctl.runtime.attention.layout import SeqChunk
from dcpctl.runtime.kv import KVPool, VirtualAllocator, local_len


class OldPrepare(DecodeGraphs):
    def prepare(self, ids, chunks):   # the pre-DeviceBlockTable prepare, verbatim
        n, b = len(chunks), self.graph_size(len(chunks))
        pos = [ch.start for ch in chunks] + [0] * (b - n)
        lens = [local_len(p + 1, self.rank, self.c) for p in pos[:n]] + [0] * (b - n + 1)
        table = torch.zeros(b + 1, self.max_pages, dtype=torch.int32)
        slots = [self.trash] * b
        for i, ch in enumerate(chunks):
            pages = self.alloc.pages(ch.rid)[:self.alloc.pages_for(ch.start + 1)]
            table[i, :len(pages)] = torch.tensor(pages, dtype=torch.int32)
            if ch.start % self.c == self.rank:
                slots[i] = pages[ch.start // self.alloc.page_tokens] * self.page \
                    + (ch.start % self.alloc.page_tokens) // self.c
        self.ids[:n].copy_(ids)   # was: the eager embedding into a hidden buffer (now inside the graph)
        self.positions[:b].copy_(torch.tensor(pos), non_blocking=True)
        self.q_pos[:b].copy_(torch.tensor(pos, dtype=torch.int32), non_blocking=True)
        self.local_lens[:b + 1].copy_(torch.tensor(lens, dtype=torch.int32), non_blocking=True)
        self.block_table[:b + 1].copy_(table, non_blocking=True)
        self.write_slots[:b].copy_(torch.tensor(slots), non_blocking=True)
        return b


def _runner(cls: type, batch: int, context: int, steps: int, page: int, c: int):
    total = context + steps + 1
    alloc = VirtualAllocator((batch + 1) * (-(-total // (page * c)) + 1) * page, page, c)
    for rid in range(batch):
        alloc.allocate(rid, total)
    model = SimpleNamespace(ps=SimpleNamespace(attn_dp_size=1, dcp=SimpleNamespace(rank=0)),
                            cfg=SimpleNamespace(hidden_size=8), dtype=torch.float32,
                            _embed=lambda ids: torch.zeros(len(ids), 8))
    g = cls(model, alloc, KVPool(1, 4, 8, torch.float32), {}, 8, [batch], alloc.pages_for(total), 0)
    return g, alloc


def _time(g, chunks) -> float:
    ids = torch.zeros(len(chunks), dtype=torch.int64)
    t0 = time.perf_counter()
    g.prepare(ids, chunks)
    return (time.perf_counter() - t0) * 1e3


def measure(cls: type, batch: int, context: int, steps: int, page: int, c: int) -> dict[str, float]:
    g, alloc = _runner(cls, batch, context, steps, page, c)
    cold = _time(g, [SeqChunk(r, context, 1) for r in range(batch)])
    steady = [_time(g, [SeqChunk(r, context + s, 1) for r in range(batch)]) for s in range(1, steps)]
    rids, churn = list(range(batch)), []
    for s in range(steps):
        gone = rids.pop(len(rids) // 2)
        alloc.free(gone)
        alloc.allocate(batch + s, context + steps + 1)
        rids.append(batch + s)
        churn.append(_time(g, [SeqChunk(r, context + steps, 1) for r in rids]))
    return {"cold": cold, "steady": statistics.median(steady), "steady_max": max(steady),
            "churn": statistics.median(churn)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--context", type=int, default=131072)
    ap.add_argument("--page", type=int, default=64)
    ap.add_argument("--dcp", default="1,2")
    ap.add_argument("--steps", type=int, default=130)
    a = ap.parse_args()
    print(f"B={a.batch} context={a.context} page={a.page} steps={a.steps}; prepare host ms (median; "
          "steady_max: worst steady step, a page-boundary crossing)")
    print(f"{'dcp':>3} {'pages/req':>9} {'scenario':>10} {'old':>8} {'new':>8} {'old/new':>8}")
    for c in [int(x) for x in a.dcp.split(",")]:
        old = measure(OldPrepare, a.batch, a.context, a.steps, a.page, c)
        new = measure(DecodeGraphs, a.batch, a.context, a.steps, a.page, c)
        pages = -(-(a.context + 1) // (a.page * c))
        for k in old:
            print(f"{c:>3} {pages:>9} {k:>10} {old[k]:>8.3f} {new[k]:>8.3f} {old[k] / new[k]:>8.1f}")


if __name__ == "__main__":
    main()
