"""DecodeGraphs' static buffers on CPU (replay runs the captured stack eagerly there): decode steps
through the buffers (padded block table, trash slot for rows a rank does not own, padded batch)
equal model.forward through build_context, float64, DCP 1 and 2."""
import numpy as np
import pytest
import torch

from dcpctl.runtime.attention.dcp import SeqChunk, build_context
from dcpctl.runtime.engine.decode_graphs import DecodeGraphs
from dcpctl.runtime.kv import KVPool, VirtualAllocator
from dcpctl.runtime.parallel import ParallelState
from tests.dist import run_ranks
from tests.runtime.configs import typed

PAGE, LENS, STEPS = 2, [1, 6, 11], 3


def _rank(rank, world, path, use_graphs):
    from dcpctl.runtime.models import load_model
    groups = {k: [list(range(world))] for k in ("tp", "attn_tp", "attn_dp", "dcp", "ep")}
    ps = ParallelState.build(groups) if world > 1 else ParallelState.single()
    decisions = {"dcp_comm_backend": "a2a" if world > 1 else "ag_rs", "attention_path": "paged"}
    model = load_model(path, ps, False, torch.float64, "cpu")
    alloc = VirtualAllocator(64, PAGE, world)
    pool = KVPool(model.cfg.num_layers, (alloc.num_pages + 1) * PAGE, model.cfg.latent_dim, torch.float64)
    for rid, n in enumerate(LENS):
        alloc.allocate(rid, n + STEPS)
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(0, 250, (n,), generator=g) for n in LENS]
    ctx = build_context(alloc, pool, ps.dcp, typed(decisions),
                        [SeqChunk(r, 0, n) for r, n in enumerate(LENS)], model.cfg.kv_lora_rank)
    model.forward(torch.cat(prompts), ctx.positions, ctx)
    runner = (DecodeGraphs(model, alloc, pool, typed(decisions), model.cfg.kv_lora_rank, [2, 4],
                           alloc.pages_for(max(LENS) + STEPS) + 1, alloc.num_pages * PAGE)
              if use_graphs else None)
    outs = []
    for s in range(STEPS):
        chunks = [SeqChunk(r, n + s, 1) for r, n in enumerate(LENS)]
        ids = torch.tensor([5 + s] * len(LENS))
        if runner is not None:
            h = runner.replay(ids, chunks)
        else:
            ctx = build_context(alloc, pool, ps.dcp, typed(decisions), chunks, model.cfg.kv_lora_rank)
            h = model.forward(ids, ctx.positions, ctx)
        outs.append(h.clone().numpy())
    return outs, pool.kv[:, :alloc.num_pages * PAGE].numpy().copy(), dict(runner.kernels) if runner else {}


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    from dcpctl.runtime.tiny import write_tiny_model
    return str(write_tiny_model(tmp_path_factory.mktemp("g") / "m", num_hidden_layers=2,
                                first_k_dense_replace=2))


@pytest.mark.parametrize("world", [1, 2])
def test_graph_buffers_equal_eager_steps(path, world):
    eager = run_ranks(_rank, world, path, False)
    graph = run_ranks(_rank, world, path, True)
    for (eo, ep, _), (go, gp, kernels) in zip(eager, graph):
        assert kernels == {(4, max(r for _, r in kernels)): "torch"}  # the batch of 3 replays size 4's graph
        # same rows, same slots (padded GEMMs round apart)
        np.testing.assert_allclose(gp, ep, atol=1e-12, rtol=0)
        for a, b in zip(go, eo):
            torch.testing.assert_close(torch.from_numpy(a), torch.from_numpy(b), atol=1e-12, rtol=1e-12)


def test_the_startup_summary_says_which_kernel_decodes_at_which_context():
    from dcpctl.runtime.engine.graph_plan import kernel_summary
    picks = {(b, rows): "triton" for b in (1, 8, 32) for rows in (2048, 4096)}
    picks.update({(1, 8192): "triton", (8, 8192): "flashmla", (32, 8192): "flashmla"})
    picks.update({(b, 16384): "flashmla" for b in (1, 8, 32)})
    assert kernel_summary(picks, 2) == ("<= 8192: ours; <= 16384: FlashMLA at batch 8,32, ours at batch 1; "
                                        "<= 32768: FlashMLA")



def test_graphs_ask_for_the_requested_backend(path):
    """--attention-backend reaches the graphs' batches as it reaches eager ones (the selector picks for
    both)."""
    from dcpctl.runtime.models import load_model
    ps = ParallelState.single()
    model = load_model(path, ps, False, torch.float64, "cpu")
    alloc = VirtualAllocator(64, PAGE, 1)
    pool = KVPool(model.cfg.num_layers, (alloc.num_pages + 1) * PAGE, model.cfg.latent_dim, torch.float64)
    for want in ("triton", "auto"):
        runner = DecodeGraphs(model, alloc, pool,
                              typed({"attention_path": "paged", "attention_backend": want}),
                              model.cfg.kv_lora_rank, [2], 4, alloc.num_pages * PAGE)
        assert runner._context(2, runner.buckets[0]).attention_backend == want
