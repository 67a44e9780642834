"""Dense SwiGLU MLP and DeepSeek MoE (router, routed experts, shared experts).

Every callable returns this rank's partial sum; the model all-reduces it over the TP group.
The router runs in the upcast dtype on every rank (fp32 as in HF and DeepSeek; float64 models keep
float64), with its weights stored in that dtype.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from dcpctl.runtime.gpu import gpu_facts
from dcpctl.runtime.models.checkpoint import Want
from dcpctl.runtime.models.config import MlaConfig
from dcpctl.runtime.kernels.moe_combine import moe_combine
from dcpctl.runtime.models.quant import Fp8Weight, Weight, concat_rows, grouped_linear, linear, rows, stack
from dcpctl.runtime.models.shards import Shards, split
from dcpctl.runtime.kernels.swiglu_triton import swiglu_fused, swiglu_kernel_ok


def mlp_wants(p: str, hidden: int, inter: int, parts: int, idx: int, what: str) -> list[Want]:
    """gate/up rows and down columns of part idx of the intermediate dimension."""
    a, b = split(inter, parts, idx, what, "its tensor-parallel degree")
    return [Want(p + "gate_proj.weight", (inter, hidden), 0, a, b, fp8_ok=True),
            Want(p + "up_proj.weight", (inter, hidden), 0, a, b, fp8_ok=True),
            Want(p + "down_proj.weight", (hidden, inter), 1, a, b, fp8_ok=True)]


class DenseMLP:
    """SwiGLU. Gate and up are one [2I, D] weight (one GEMM, one launch at decode) wherever they
    concatenate (quant.concat_rows); `gate` and `up` are views of its halves.  `fused`: silu and the product
    in one kernel on CUDA (fusions.py `swiglu`)."""

    def __init__(self, p: str, t: dict[str, Tensor], fused: bool = False):
        self.fused = fused
        names = [p + n + ".weight" for n in ("gate_proj", "up_proj", "down_proj")]
        gate, up, self.down = (t[n] for n in names)
        self.inter = gate.shape[-2]
        self.gate_up = concat_rows(gate, up)
        self.pair = (gate, up) if self.gate_up is None else None
        if self.gate_up is not None:
            for n in names[:2]:
                t.pop(n)   # the concatenation replaces the loaded halves: free them now, not after the load

    @property
    def gate(self) -> Weight:
        return self.pair[0] if self.gate_up is None else rows(self.gate_up, 0, self.inter)

    @property
    def up(self) -> Weight:
        return self.pair[1] if self.gate_up is None else rows(self.gate_up, self.inter, 2 * self.inter)

    def weights(self) -> list[Weight]:
        return [*self.pair, self.down] if self.gate_up is None else [self.gate_up, self.down]

    def set_weights(self, ws: list[Weight]) -> None:
        if self.gate_up is None:
            self.pair, self.down = (ws[0], ws[1]), ws[2]
        else:
            self.gate_up, self.down = ws

    def __call__(self, x: Tensor) -> Tensor:
        # x: [T, D] -> [T, D] partial over the intermediate split
        if self.gate_up is None:
            return linear(F.silu(linear(x, self.gate)) * linear(x, self.up), self.down)
        return linear(swiglu(linear(x, self.gate_up), self.inter, self.fused), self.down)


def swiglu(h: Tensor, inter: int, fused: bool = False) -> Tensor:
    # h: [T, 2I] (gate, up) -> [T, I]
    if fused and swiglu_kernel_ok(h):
        return swiglu_fused(h, inter)
    g, u = h.split(inter, -1)
    return F.silu(g) * u


def moe_wants(cfg: MlaConfig, p: str, s: Shards, upcast: torch.dtype) -> list[Want]:
    D, E, I = cfg.hidden_size, cfg.n_routed_experts, cfg.moe_intermediate_size  # noqa: E741
    wants = [Want(p + "gate.weight", (E, D), dtype=upcast)]
    if cfg.topk_method == "noaux_tc":
        wants.append(Want(p + "gate.e_score_correction_bias", (E,), dtype=upcast))
    for e in range(s.expert_start, s.expert_end):
        wants += mlp_wants(f"{p}experts.{e}.", D, I, s.moe_tp_size, s.moe_tp_rank, "moe_intermediate_size")
    if cfg.n_shared_experts:
        wants += mlp_wants(p + "shared_experts.", D, I * cfg.n_shared_experts, s.tp_size, s.tp_rank,
                           "moe_intermediate_size * n_shared_experts")
    return wants


class Router:
    def __init__(self, cfg: MlaConfig, weight: Tensor, bias: Tensor | None):
        self.cfg, self.weight, self.bias = cfg, weight, bias

    def __call__(self, x: Tensor) -> tuple[Tensor, Tensor]:
        # x: [T, D] -> weights [T, k] in the router dtype, experts [T, k] int64
        cfg = self.cfg
        logits = linear(x.to(self.weight.dtype), self.weight)    # quant.linear: the warm-up records it
        scores = logits.sigmoid() if cfg.scoring_func == "sigmoid" else logits.softmax(-1)
        if cfg.topk_method == "noaux_tc":
            idx = self._grouped(scores + self.bias, float("-inf"), top2_sum=True)
        elif cfg.topk_method == "group_limited_greedy":
            idx = self._grouped(scores, 0.0, top2_sum=False)
        else:
            idx = scores.topk(cfg.top_k, dim=-1)[1]
        w = scores.gather(1, idx)
        if cfg.norm_topk_prob and (cfg.top_k > 1 or cfg.topk_method == "noaux_tc"):
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        return w * cfg.routed_scaling_factor, idx

    def _grouped(self, choice: Tensor, fill: float, top2_sum: bool) -> Tensor:
        # choice: [T, E] -> [T, k] experts chosen only from the topk_group best groups
        cfg = self.cfg
        grouped = choice.view(choice.shape[0], cfg.n_group, cfg.n_routed_experts // cfg.n_group)
        if top2_sum:  # V3: a group scores the sum of its two best experts
            group_scores = grouped.topk(min(2, grouped.shape[-1]), dim=-1)[0].sum(-1)
        else:  # V2: a group scores its best expert
            group_scores = grouped.max(-1).values
        keep = torch.zeros_like(group_scores, dtype=torch.bool)
        keep.scatter_(1, group_scores.topk(cfg.topk_group, dim=-1)[1], True)
        choice = grouped.masked_fill(~keep[..., None], fill).view_as(choice)
        return choice.topk(cfg.top_k, dim=-1)[1]


GROUPED_MAX_TOKENS = 512   # block-FP8 experts under w8a16: above it the per-expert loop (dequantized, cuBLAS)
BLOCK_TOKENS = 4096        # tokens routed per pass: the sorted rows (T * k x (D + 2I) transient) stay bounded


def token_passes(tokens: int) -> list[int]:
    """The token counts of the routed experts' passes over `tokens` tokens: BLOCK_TOKENS each, the rest
    last."""
    return [min(BLOCK_TOKENS, tokens - i) for i in range(0, tokens, BLOCK_TOKENS)]


def grouped_mm_ok(w: Weight) -> bool:
    """Whether the routed experts run as grouped GEMMs: block-FP8 experts on a GPU through the grouped
    block-scaled GEMM (fp8_gemm.py); bf16 through torch._grouped_mm's CUTLASS kernel (sm_9x and sm_10x;
    elsewhere torch falls back to a loop that reads the offsets back to the host), every dimension a
    multiple of 8.  Otherwise one small GEMM chain per expert."""
    if isinstance(w, Fp8Weight):
        return w.is_cuda
    return (hasattr(torch, "_grouped_mm") and w.is_cuda and w.dtype == torch.bfloat16
            and gpu_facts(w.device).sm[0] in (9, 10) and all(d % 8 == 0 for d in w.shape))


def _grouped_gemm(x: Tensor, w: Weight, ends: Tensor, rows: int) -> Tensor:
    # x: [R, K] rows sorted by expert, w: [E, N, K], ends: [E] int32 -> [R, N]; rows: per expert (the choice)
    if isinstance(w, Fp8Weight):
        return grouped_linear(x, w, ends, rows)
    return torch._grouped_mm(x, w.transpose(1, 2), offs=ends)


class MoE:
    def __init__(self, cfg: MlaConfig, p: str, t: dict[str, Tensor], s: Shards):
        self.router = Router(cfg, t[p + "gate.weight"], t.get(p + "gate.e_score_correction_bias"))
        self.first = s.expert_start
        self.experts = [DenseMLP(f"{p}experts.{e}.", t) for e in range(s.expert_start, s.expert_end)]
        self.shared = DenseMLP(p + "shared_experts.", t) if cfg.n_shared_experts else None
        self.stacked: tuple[Weight, ...] | None = None   # [E, 2I, D], [E, D, I] (or [E, I, D] x 2, [E, D, I])
        if self.experts and grouped_mm_ok(self.experts[0].gate):
            self.stack_experts()
            for e in range(s.expert_start, s.expert_end):   # the stack holds them now (views below)
                for n in ("gate_proj", "up_proj", "down_proj"):
                    t.pop(f"{p}experts.{e}.{n}.weight", None)

    def stack_experts(self) -> None:
        """One [E, ...] tensor per expert weight (gate_up and down, or gate, up and down) for the grouped
        GEMMs; each expert keeps views into it."""
        self.stacked = tuple(stack(list(ws)) for ws in zip(*(e.weights() for e in self.experts)))
        for j, e in enumerate(self.experts):
            e.set_weights([w[j] for w in self.stacked])

    def __call__(self, x: Tensor, valid: Tensor | None = None) -> Tensor:
        # x: [T, D] -> [T, D] partial: this rank's experts and intermediate slices, in passes (token_passes)
        # valid: a device scalar (mlp_graphs: a graph's padded rows): rows at or past it reach no expert
        # (their routed part is zero), so padding costs the router and the shared expert only
        w, idx = self.router(x)
        parts, i = [], 0
        for n in token_passes(x.shape[0]):
            parts.append(self._routed(x[i:i + n], w[i:i + n], idx[i:i + n],
                                      None if valid is None else valid - i))
            i += n
        out = parts[0] if len(parts) == 1 else torch.cat(parts) if parts else torch.zeros_like(x)
        return out + self.shared(x) if self.shared is not None else out

    def runs_grouped(self, tokens: int) -> bool:
        """Whether a pass of `tokens` tokens runs the routed experts as grouped GEMMs (else one chain per
        expert, a host sync): block-FP8 experts under w8a16 up to GROUPED_MAX_TOKENS tokens (past it, cuBLAS
        on each expert's dequantized weights beats the grouped kernel), under w8a8 and auto where the
        GPU's fp8_gemm table does not say per_expert for the pass's rows per expert (fp8_tiles.per_expert)."""
        if self.stacked is None:
            return False
        w = self.stacked[0]
        if not isinstance(w, Fp8Weight):
            return True
        if w.is_cuda and torch.cuda.is_current_stream_capturing():
            return True     # a graph (a decode step past the cap, say) cannot take the per-expert host sync
        from dcpctl.runtime.kernels import fp8_parts, fp8_tiles
        setting = fp8_parts.activation_mode()
        if setting == "w8a16":
            return tokens <= GROUPED_MAX_TOKENS
        return not fp8_tiles.per_expert(w.shape[-2], w.shape[-1], self.rows_per_expert(tokens), setting,
                                        w.w8.device)

    def rows_per_expert(self, tokens: int) -> int:
        """The average rows an expert gets from a pass of `tokens` tokens, what its kernels are chosen by (the
        grouped GEMM's rows hold every rank's under expert parallelism, so not R over the local experts)."""
        cfg = self.router.cfg
        return max(1, tokens * cfg.top_k // cfg.n_routed_experts)

    def grouped_cap(self) -> int | None:
        """The most tokens a pass runs grouped from one token up (a CUDA graph piece's cap), None: every
        pass."""
        if self.stacked is None or not isinstance(self.stacked[0], Fp8Weight):
            return None
        from dcpctl.runtime.kernels import fp8_parts
        if fp8_parts.activation_mode() == "w8a16":
            return GROUPED_MAX_TOKENS
        seen: dict[int, bool] = {}    # here the answer depends on the tokens through rows_per_expert only
        for t in range(1, BLOCK_TOKENS + 1):
            per = self.rows_per_expert(t)
            if per not in seen:
                seen[per] = self.runs_grouped(t)
            if not seen[per]:
                return t - 1
        return None

    def _routed(self, x: Tensor, w: Tensor, idx: Tensor, valid: Tensor | None = None) -> Tensor:
        # x: [T, D]  w, idx: [T, k] -> [T, D]: the (token, slot) rows sorted by local expert, each expert's
        # GEMMs over its rows (grouped on the device, or one chain per expert), then moe_combine's weighted
        # fp32 sum
        if x.shape[0] == 0:
            return torch.zeros_like(x)
        if self.runs_grouped(x.shape[0]):
            return self._grouped(x, w, idx, valid)
        order, ends = self._by_expert(idx, valid)
        xs = x[order // idx.shape[1]]
        y = x.new_empty(xs.shape)
        start = 0
        for j, end in enumerate(ends.tolist()):    # one host sync per pass: the group ends
            if end > start:
                y[start:end] = self.experts[j](xs[start:end])
            start = end
        return moe_combine(y, order, ends, w)

    def _by_expert(self, idx: Tensor, valid: Tensor | None = None) -> tuple[Tensor, Tensor]:
        # idx: [T, k] global expert ids -> order [T*k]: the flat (token, slot) rows (tok * k + slot), stably
        # sorted by local expert, other ranks' experts (and tokens at or past `valid`) last; ends [e]: the row
        # where each local expert's group ends.  Both stay on the device (searchsorted, not bincount or a
        # boolean mask: those size their output from the data, a device-to-host sync)
        e = len(self.experts)
        local = idx.reshape(-1) - self.first
        mine = (local >= 0) & (local < e)
        if valid is not None:
            mine &= torch.arange(local.numel(), device=local.device) < valid * idx.shape[1]
        keys, order = torch.sort(torch.where(mine, local, e), stable=True)
        return order, torch.searchsorted(keys, torch.arange(e, device=keys.device), right=True)

    def _grouped(self, x: Tensor, w: Tensor, idx: Tensor, valid: Tensor | None = None) -> Tensor:
        # x: [T, D]  w, idx: [T, k] -> [T, D]: every local expert in three grouped GEMMs over the (token,
        # slot) rows sorted by expert; the group ends stay on the device, so no host sync (graph-safe)
        order, ends = self._by_expert(idx, valid)
        ends = ends.to(torch.int32)
        xs = x[order // idx.shape[1]]                                              # [T*k, D]
        per = self.rows_per_expert(x.shape[0]) if isinstance(self.stacked[0], Fp8Weight) else 0
        if len(self.stacked) == 2:
            gate_up, down = self.stacked
            h = swiglu(_grouped_gemm(xs, gate_up, ends, per), self.experts[0].inter)
        else:
            gate, up, down = self.stacked
            h = F.silu(_grouped_gemm(xs, gate, ends, per)) * _grouped_gemm(xs, up, ends, per)
        y = _grouped_gemm(h, down, ends, per)                                      # rows past ends[-1]: unset
        return moe_combine(y, order, ends, w)
