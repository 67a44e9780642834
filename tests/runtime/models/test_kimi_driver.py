"""Test driver for hybrid (KDA + MLA) models: contexts that carry the batch's SeqChunks, and greedy
prefill + decode through the model's KDA state pool (admit before the first chunk, release after).

    kimi_greedy(model, prompts, steps, make_ctx, chunk=None, release=True)
        -> (prefill logits, decode logits, ids)
        (also drives DeepSeek models, which hold no KDA state)
    ref_ctx(model) -> make_ctx for the dense reference context (single rank, or TP without DCP)
    dcp_ctx(model, ps, decisions, form=...) -> make_ctx for the real DCP context (allocator + KV pool); form
        pins the absorbed or MHA attention form (default: the per-batch rule), mha_block_bytes its key block
        size
"""
from __future__ import annotations

import torch

from dcpctl.runtime.attention.dcp import SeqChunk, build_context
from dcpctl.runtime.kv import KVPool, VirtualAllocator
from tests.runtime.configs import typed
from tests.runtime.ref_context import RefContext


def ref_ctx(model, dcp_rank: int = 0, dcp_size: int = 1):
    ctx = RefContext(model.cfg.kv_lora_rank, dcp_rank, dcp_size)

    def make(chunks: list[SeqChunk]):
        ctx.set_batch([c.rid for c in chunks for _ in range(c.num_tokens)],
                      [p for c in chunks for p in range(c.start, c.start + c.num_tokens)])
        ctx.chunks = chunks
        return ctx
    return make


def dcp_ctx(model, ps, decisions: dict, capacity: int = 64, page: int = 2, form: str = "auto",
            mha_block_bytes: int | None = None):
    alloc = VirtualAllocator(capacity, page, ps.dcp.size)
    pool = KVPool(model.kv_layers, alloc.num_pages * page, model.cfg.latent_dim, model.dtype, model.device)

    def make(chunks: list[SeqChunk]):
        for c in chunks:
            alloc.allocate(c.rid, c.start + c.num_tokens)
        ctx = build_context(alloc, pool, ps.dcp, typed(decisions), chunks, model.cfg.kv_lora_rank, form=form)
        if mha_block_bytes is not None:
            ctx.mha_block_bytes = mha_block_bytes   # small key blocks: the MHA form's block loop runs
        ctx.chunks = chunks  # the SeqChunks the KDA layers need (until the layout carries them)
        return ctx
    make.alloc, make.pool = alloc, pool
    return make


def _step(model, chunks, ids, make_ctx) -> torch.Tensor:
    ctx = make_ctx(chunks)
    pos = torch.tensor([p for c in chunks for p in range(c.start, c.start + c.num_tokens)], dtype=torch.int64)
    return model.logits(model.forward(torch.tensor(ids, dtype=torch.int64), pos, ctx))


def kimi_greedy(model, prompts: list[list[int]], steps: int, make_ctx, chunk: int | None = None,
                release: bool = True):
    """Admit every prompt, prefill (in chunks of `chunk` tokens when given), decode `steps` greedy
    tokens in batches, then release. Returns per prompt: prefill logits [len, V], decode logits
    [steps, V] and the generated ids."""
    pool = model.kda_pool            # None for models without request-indexed state (DeepSeek)
    for rid in range(len(prompts) if pool is not None else 0):
        pool.admit(rid)
    done, pre = [0] * len(prompts), [[] for _ in prompts]
    while any(d < len(p) for d, p in zip(done, prompts)):
        chunks = [SeqChunk(r, done[r], min(chunk or len(p), len(p) - done[r]))
                  for r, p in enumerate(prompts) if done[r] < len(p)]
        out = _step(model, chunks,
                    [t for c in chunks for t in prompts[c.rid][c.start:c.start + c.num_tokens]], make_ctx)
        row = 0
        for c in chunks:
            pre[c.rid].append(out[row:row + c.num_tokens])
            row += c.num_tokens
            done[c.rid] += c.num_tokens
    pre = [torch.cat(p) for p in pre]
    last, outs, dec = [p[-1] for p in pre], [[] for _ in prompts], [[] for _ in prompts]
    for _ in range(steps):
        nxt = [int(x.argmax()) for x in last]
        chunks = [SeqChunk(r, done[r], 1) for r in range(len(prompts))]
        out = _step(model, chunks, nxt, make_ctx)
        for r, t in enumerate(nxt):
            outs[r].append(t)
            dec[r].append(out[r])
            last[r] = out[r]
            done[r] += 1
    if release and pool is not None:
        for rid in range(len(prompts)):
            model.release(rid)
    return pre, [torch.stack(d) if d else torch.zeros(0) for d in dec], outs
