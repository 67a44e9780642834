"""MoE routing of an emulated rank (`dcpctl bench rank --routing`): each layer's expert choice, fixed per
step.

| routing | each token's k experts                                                                        |
| ------- | --------------------------------------------------------------------------------------------- |
| uniform | the model's group-limited top-k shape (topk_group of n_group groups) with balanced choice:    |
|         | token t takes groups t*topk_group.. (mod n_group), each group's experts in turn, so every     |
|         | expert gets T*k/E rows (within one) and every EP rank T*k/ep                                  |
| busiest | what the model's own router picks for random hidden states, per layer; then the EP rank whose |
|         | experts get the most rows in that layer swaps its expert block with this rank's, since under  |
|         | EP every layer waits for its busiest rank                                                     |
| model   | the model's router on the step's own activations (no override; what a served step routes)    |

The model's router always runs (its GEMM and top-k are part of the step); `uniform` and `busiest` replace only
its choice, from a buffer per layer written before a replay, so one captured graph serves both.  Whether the
choice is replaced is fixed when a graph is captured (`choose` before the capture).
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


class FixedRouting:
    """A MoE layer's router whose choice comes from `idx` (rows [0, T) for a pass of T tokens) when `on`."""

    def __init__(self, router: Any, rows: int, device: torch.device) -> None:
        self.router, self.on = router, False
        self.idx = torch.zeros(rows, router.cfg.top_k, dtype=torch.int64, device=device)

    def __getattr__(self, name: str) -> Any:
        # the wrapped router's fields (cfg, weight, ...), as code that inspects a model's routers reads them
        if name == "router":
            raise AttributeError(name)
        return getattr(self.router, name)

    def __call__(self, x: Tensor) -> tuple[Tensor, Tensor]:
        # x: [T, D] -> router weights [T, k], experts [T, k]
        w, idx = self.router(x)
        return (w, self.idx[:x.shape[0]]) if self.on else (w, idx)


def install(model: Any, rows: int) -> list[FixedRouting]:
    """Every MoE layer's router wrapped (rows: the most tokens a step's MLP sees); [] for a dense model."""
    out = []
    for layer in model.layers:
        if hasattr(layer.mlp, "router"):
            layer.mlp.router = FixedRouting(layer.mlp.router, rows, model.device)
            out.append(layer.mlp.router)
    return out


def balanced(cfg: Any, tokens: int) -> Tensor:
    """[tokens, k] expert ids: the uniform routing (module docstring)."""
    k, groups, per_token = cfg.top_k, cfg.n_group, cfg.topk_group
    size = cfg.n_routed_experts // groups
    turn = [0] * groups
    rows = []
    for t in range(tokens):
        mine = [(t * per_token + j) % groups for j in range(per_token)]
        row = []
        for s in range(k):
            g = mine[s % per_token]
            row.append(g * size + turn[g])
            turn[g] = (turn[g] + 1) % size
        rows.append(row)
    return torch.tensor(rows, dtype=torch.int64)


def busiest(cfg: Any, router: Any, tokens: int, ep: int, ep_rank: int, g: torch.Generator) -> Tensor:
    """[tokens, k] expert ids: the busiest routing (module docstring) for this rank's EP index `ep_rank`."""
    x = torch.randn(tokens, cfg.hidden_size, generator=g).to(router.weight.device)
    idx = router(x)[1].cpu()
    block = cfg.n_routed_experts // ep
    rows = torch.bincount(idx.reshape(-1) // block, minlength=ep)
    top = int(rows.argmax())
    owner = idx // block
    shift = (ep_rank - top) * block
    return torch.where(owner == top, idx + shift, torch.where(owner == ep_rank, idx - shift, idx))


def choose(routers: list[FixedRouting], cfg: Any, routing: str, tokens: int, ep: int, ep_rank: int,
           seed: int = 0) -> dict[str, float]:
    """Set every layer's choice for steps of `tokens` MLP rows; returns what this rank's experts get: rows per
    layer and distinct experts per layer, each the mean over the MoE layers."""
    g = torch.Generator().manual_seed(seed + tokens)
    rows, active, block = 0, 0, cfg.n_routed_experts // ep
    for r in routers:
        r.on = routing != "model"
        if not r.on:
            continue
        idx = (balanced(cfg, tokens)
               if routing == "uniform" else busiest(cfg, r.router, tokens, ep, ep_rank, g))
        r.idx[:tokens].copy_(idx)
        local = idx[(idx // block) == ep_rank]
        rows += local.numel()
        active += local.unique().numel()
    n = max(1, len(routers)) if routing != "model" else 0
    return {"expert_rows": rows / n, "experts_active": active / n} if n else {}
