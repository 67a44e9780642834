"""One `bench decode` cell on one rank: B requests with L cached positions, timed decode steps.

Eager steps build the DCP context per step (the paged path on CUDA) and run model.forward;
with CUDA graphs the same steps replay `DecodeGraphs` (static buffers, host prep per step): graph_ms
is the GPU time of one replay (the mean of REPLAYS back-to-back replays after a barrier, so a
rank's number never includes a peer's host work), graph_step_ms the wall time of prep + one replay.
The prediction is the planner's roofline (plan/cost.py layer_cost: attention + projection GEMMs
+ exchange) plus the dense MLP's three GEMMs, per layer, with the ceilings measured in the run.
"""
from __future__ import annotations

import statistics
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from dcpctl.contract.fields import parse_section
from dcpctl.contract.launch_config import Decisions
from dcpctl.runtime.attention.dcp import SeqChunk, build_context
from dcpctl.runtime.kv.allocator import VirtualAllocator
from dcpctl.runtime.kv.pool import KVPool

REPLAYS = 10   # graph replays per timed step (their mean is the step's GPU time)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def setup_pool(model: Any, c: int, batch: int, total: int, page: int, device: torch.device,
               spare: bool) -> tuple[VirtualAllocator, KVPool]:
    """B requests of `total` positions allocated (every rank's allocator alike) and this rank's pool of their
    rows, filled with random rows (only timing matters); `spare`: one more page, where graphs write the rows
    this rank does not own."""
    per_rank = -(-batch * (-(-total // (page * c)) * page * c) // c)
    alloc = VirtualAllocator(per_rank, page, c)
    for rid in range(batch):
        alloc.allocate(rid, total)
    rows = (alloc.num_pages + int(spare)) * page       # a spare page: graph writes of rows this rank does not
                                                       # own
    pool = KVPool(model.cfg.num_layers, rows, model.cfg.latent_dim, model.dtype, device)
    pool.kv.normal_()
    return alloc, pool


def decode_ids(batch: int, vocab: int, device: torch.device) -> Tensor:
    """A step's input tokens: distinct per row (fixed by the batch size), so that a MoE routes the rows as a
    served batch does, over many experts; one token for every row would send the whole batch to the same top-k
    experts."""
    g = torch.Generator().manual_seed(batch)
    return torch.randint(vocab, (batch,), generator=g).to(device)


def run_cell(model: Any, ps: Any, decisions: dict, batch: int, ctx_len: int, steps: int, warmup: int,
             page: int, device: torch.device, graphs: bool) -> dict[str, Any]:
    """Eager (and optionally graph) step times of one (B, L) cell on this rank."""
    c, cfg = ps.dcp.size, model.cfg
    total = ctx_len + 2 * (warmup + steps) + 1
    alloc, pool = setup_pool(model, c, batch, total, page, device, graphs)
    ids = decode_ids(batch, model.cfg.vocab_size, device)
    fwd, lay, read = [], [], []
    typed = parse_section(Decisions, decisions, "decisions")   # the typed form build_context and DecodeGraphs
                                                               # take
    for s in range(warmup + steps):
        t0 = time.perf_counter()
        ctx = build_context(alloc, pool, ps.dcp, typed, [SeqChunk(r, ctx_len + s, 1) for r in range(batch)],
                            cfg.kv_lora_rank)
        _sync(device)
        t1 = time.perf_counter()
        model.forward(ids, ctx.positions, ctx)
        _sync(device)
        t2 = time.perf_counter()
        if s >= warmup:
            lay.append(t1 - t0)
            fwd.append(t2 - t1)
            read.append(ctx.kv_bytes_read)
    out = {"step_ms": statistics.median(fwd) * 1e3, "layout_ms": statistics.median(lay) * 1e3,
           "kv_bytes_read": read[-1], "paged": bool(ctx.paged)}
    if graphs:
        try:
            out.update(_graph_steps(model, alloc, pool, typed, batch, ctx_len + warmup + steps, steps, warmup,
                                    device))
        except Exception as e:  # noqa: BLE001 - keep the eager numbers, report why the graph did not run
            out["graph_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    del pool
    return out


def _graph_steps(model: Any, alloc: VirtualAllocator, pool: KVPool, decisions: Any, batch: int, start: int,
                 steps: int, warmup: int, device: torch.device) -> dict[str, Any]:
    from dcpctl.runtime.engine.decode_graphs import DecodeGraphs
    page = alloc.page_tokens // alloc.dcp
    t0 = time.perf_counter()
    g = DecodeGraphs(model, alloc, pool, decisions, model.cfg.kv_lora_rank, [batch],
                     alloc.pages_for(start + warmup + steps + 1), alloc.num_pages * page)
    capture_s = time.perf_counter() - t0
    ids = decode_ids(batch, model.cfg.vocab_size, device)
    gpu, wall = [], []
    for s in range(warmup + steps):
        chunks = [SeqChunk(r, start + s, 1) for r in range(batch)]
        _sync(device)
        t0 = time.perf_counter()
        graph = g.graphs[g.prepare(ids, chunks)].graph
        graph.replay()
        torch.cuda.synchronize(device)
        wall_ms = (time.perf_counter() - t0) * 1e3
        # GPU time: every rank starts together (a barrier, so no rank's clock includes a peer's host work),
        # then REPLAYS back-to-back replays of the same step (they rewrite the same new-token rows)
        if dist.is_initialized():
            dist.barrier()
            torch.cuda.synchronize(device)
        a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(REPLAYS):
            graph.replay()
        e.record()
        e.synchronize()
        if s >= warmup:
            gpu.append(a.elapsed_time(e) / REPLAYS)
            wall.append(wall_ms)
    del g
    return {"graph_ms": statistics.median(gpu), "graph_step_ms": statistics.median(wall),
            "capture_s": round(capture_s, 2)}


def predict_ms(path: str, inter: int, attn_tp: int, c: int, backend: str, replicate_q: bool, batch: int,
               ctx_len: int, consts: Any, layers: int, kv_dtype: str = "bfloat16") -> dict[str, float]:
    """Roofline step time: layers * (layer_cost + dense MLP of width inter / tp with its all-reduce) in ms,
    with parts."""
    from dcpctl.plan.cost import Choice, dense_mlp_s, layer_cost
    from dcpctl.plan.model import spec_from_path
    m = spec_from_path(path)
    lc = layer_cost(m, attn_tp, Choice(c, backend if c > 1 else "none", replicate_q and c > 1), batch,
                    ctx_len, kv_dtype, consts)
    mlp = dense_mlp_s(m.hidden_size, inter, attn_tp, batch, consts)
    per_layer = lc.layer_s + mlp
    return {"predicted_ms": per_layer * layers * 1e3, "pred_attention_ms": lc.attention_s * layers * 1e3,
            "pred_gemm_ms": lc.gemm_s * layers * 1e3, "pred_mlp_ms": mlp * layers * 1e3,
            "pred_exchange_ms": lc.exchange_s * layers * 1e3}
