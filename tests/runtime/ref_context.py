"""Test-only reference AttentionContext: dense causal attention, single process, no DCP.

Every rank keeps the full latent KV of every sequence (a per-layer cache), so with DCP size 1 it
works per rank under TP. With `dcp_rank/dcp_size` it also accepts group queries (replicated Q)
and attends only this rank's heads of the group.
"""
from __future__ import annotations

import torch
from torch import Tensor


class RefContext:
    def __init__(self, kv_lora_rank: int, dcp_rank: int = 0, dcp_size: int = 1):
        self.L, self.dcp_rank, self.dcp_size = kv_lora_rank, dcp_rank, dcp_size
        self.cache: dict[tuple[int, int], Tensor] = {}  # (layer, seq) -> [n, R]
        self.positions = torch.zeros(0, dtype=torch.int64)
        self.seq_ids = torch.zeros(0, dtype=torch.int64)

    def set_batch(self, seq_ids: list[int] | Tensor, positions: list[int] | Tensor) -> None:
        self.seq_ids = torch.as_tensor(seq_ids, dtype=torch.int64)
        self.positions = torch.as_tensor(positions, dtype=torch.int64)

    def attend(self, layer: int, q: Tensor, kv_new: Tensor, scale: float, q_is_group: bool = False) -> Tensor:
        # q: [T, H(q), R]  kv_new: [T, R] -> o: [T, H_local, L]
        if q_is_group:
            h = q.shape[1] // self.dcp_size
            q = q[:, self.dcp_rank * h:(self.dcp_rank + 1) * h]
        out = q.new_zeros(q.shape[0], q.shape[1], self.L)
        for seq in self.seq_ids.unique(sorted=False).tolist():
            rows = (self.seq_ids == seq).nonzero().flatten()
            kv = self._append(layer, seq, rows, kv_new)
            out[rows] = self._dense(q[rows], kv, self.positions[rows], scale)
        return out

    def _append(self, layer: int, seq: int, rows: Tensor, kv_new: Tensor) -> Tensor:
        old = self.cache.get((layer, seq), kv_new.new_zeros(0, kv_new.shape[1]))
        first = int(self.positions[rows[0]])
        assert first == old.shape[0], \
            f"seq {seq} layer {layer}: position {first} after {old.shape[0]} cached rows"
        self.cache[(layer, seq)] = torch.cat([old, kv_new[rows]])
        return self.cache[(layer, seq)]

    def _dense(self, q: Tensor, kv: Tensor, pos: Tensor, scale: float) -> Tensor:
        # q: [t, H, R]  kv: [n, R]  pos: [t] -> [t, H, L]
        acc = torch.float64 if q.dtype == torch.float64 else torch.float32
        s = torch.einsum("thr,nr->thn", q.to(acc), kv.to(acc)) * scale
        future = torch.arange(kv.shape[0], device=kv.device)[None, :] > pos.to(kv.device)[:, None]  # [t, n]
        p = s.masked_fill(future[:, None, :], float("-inf")).softmax(-1)
        return torch.einsum("thn,nl->thl", p, kv[:, :self.L].to(acc)).to(q.dtype)


def greedy_run(model, prompts: list[list[int]], steps: int, ctx: RefContext | None = None,
               forced: list[list[int]] | None = None):
    """Prefill all prompts in one batch, then decode `steps` tokens each in batches (`forced`: feed these
    ids instead of the argmax, so two models see the same contexts; they are then the returned ids).

    Returns (prefill_logits per prompt [len, V], decode logits per prompt [steps, V], ids per prompt).
    """
    ctx = ctx or RefContext(model.cfg.kv_lora_rank)
    seqs = [s for s, p in enumerate(prompts) for _ in p]
    pos = [i for p in prompts for i in range(len(p))]
    ids = torch.tensor([t for p in prompts for t in p], dtype=torch.int64)
    ctx.set_batch(seqs, pos)
    logits = model.logits(model.forward(ids, torch.tensor(pos, dtype=torch.int64), ctx))
    bounds = torch.tensor([0] + [len(p) for p in prompts]).cumsum(0).tolist()
    pre = [logits[a:b] for a, b in zip(bounds, bounds[1:])]
    last = [p[-1] for p in pre]
    lens, outs, dec = [len(p) for p in prompts], [[] for _ in prompts], [[] for _ in prompts]
    for step in range(steps):
        nxt = [f[step] for f in forced] if forced else [int(x.argmax()) for x in last]
        for s, t in enumerate(nxt):
            outs[s].append(t)
        live = [s for s in range(len(prompts)) if lens[s] > 0]
        ctx.set_batch(live, [lens[s] for s in live])
        i64 = dict(dtype=torch.int64)
        out = model.logits(model.forward(torch.tensor([nxt[s] for s in live], **i64),
                                         torch.tensor([lens[s] for s in live], **i64), ctx))
        for j, s in enumerate(live):
            dec[s].append(out[j])
            last[s] = out[j]
            lens[s] += 1
    return pre, [torch.stack(d) if d else torch.zeros(0) for d in dec], outs
