"""Kimi Linear (KimiLinearForCausalLM): NoPE MLA layers through the DCP context, KDA layers on a
request-indexed state pool, DeepSeek-style dense MLP / MoE; sharded for TP / EP / attention DP.

    model.forward(input_ids [T], positions [T], ctx) -> hidden [T, D]   (ctx must carry the SeqChunks)
    model.logits(hidden [T, D]) -> [T, vocab]
    model.kda_pool: KdaStatePool;  model.release(rid);  model.set_kda_capacity(max_requests)
    model.kv_layers: KV-pool layers the model addresses (MLA layers get indices 0..kv_layers-1)

Engine contract (per attention-DP replica, identical on every rank of it): before a request's first
chunk `kda_pool.can_admit()` then `kda_pool.admit(rid)`; every forward passes each request at most
once, with chunk.start 0 (fresh) or where its last chunk ended; `model.release(rid)` when it
finishes or is aborted. Under attention DP each replica's pool holds only its own requests.

Checkpoint names are Moonshot's (what transformers' save_pretrained writes): KDA `q_conv1d`,
`f_a_proj`, `A_log`, ...; MoE under `block_sparse_moe.` with experts `w1`/`w3`/`w2` (gate/up/down);
dense MLPs under `mlp.` or `block_sparse_moe.`.
"""
from __future__ import annotations

from typing import Callable

import torch
from safetensors import safe_open
from torch import Tensor

from dcpctl.runtime.attention.api import AttentionContext
from dcpctl.runtime.models.attention import MlaAttention, attention_wants
from dcpctl.runtime.models.checkpoint import EMBED, Checkpoint, Want
from dcpctl.runtime.models.deepseek import DeepseekModel, Layer
from dcpctl.runtime.models.kda import KdaAttention, kda_heads, kda_wants
from dcpctl.runtime.models.kda_state import KdaStatePool, batch_chunks
from dcpctl.runtime.errors import ModelLoadError
from dcpctl.runtime.models.build import ModelLoad
from dcpctl.runtime.models.kimi_config import HybridConfig, hybrid_config
from dcpctl.runtime.models.mlp import DenseMLP, MoE, mlp_wants, moe_wants
from dcpctl.runtime.models.ops import rms_norm
from dcpctl.runtime.models.rope import softmax_scale
from dcpctl.runtime.models.shards import Shards, plan_shards
from dcpctl.runtime.parallel import ParallelState

DEFAULT_KDA_REQUESTS = 16
_EXPERT_NAMES = {"gate_proj": "w1", "up_proj": "w3", "down_proj": "w2"}


class NoRotary:
    """NoPE: MLA layers of Kimi Linear apply no rotary embedding (k_pe, q_pe enter as computed)."""

    def __init__(self, upcast: torch.dtype):
        self.upcast, self.math_upcast = upcast, False

    def cos_sin(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        return positions, positions  # unused by apply

    def apply(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        return x


class KimiLinearModel(DeepseekModel):
    def __init__(self, hc: HybridConfig, ps: ParallelState, s: Shards, embed: Tensor, lm_head: Tensor,
                 norm: Tensor, layers: list[Layer], rotary: NoRotary, pool_args: dict):
        super().__init__(hc.mla, ps, s, embed, lm_head, norm, layers, rotary)  # type: ignore[arg-type]
        self.hybrid, self.kv_layers, self._pool_args = hc, len(hc.mla_layers), pool_args
        self.kda_pool: KdaStatePool | None = None
        self.set_kda_capacity(pool_args.pop("max_requests"))

    def set_kda_capacity(self, max_requests: int) -> None:
        """(Re)allocate the KDA state pool for `max_requests` concurrent requests; it must be empty."""
        if self.kda_pool is not None and self.kda_pool.used:
            raise RuntimeError(f"cannot resize the KDA state pool while {self.kda_pool.used} requests hold "
                               "slots")
        self.kda_pool = KdaStatePool(max_requests, **self._pool_args)

    def release(self, rid: int) -> None:
        """Free request `rid`'s KDA state slot (call once when it finishes or is aborted)."""
        self.kda_pool.release(rid)

    @torch.no_grad()
    def forward(self, input_ids: Tensor, positions: Tensor, ctx: AttentionContext) -> Tensor:
        # input_ids, positions: [T] -> hidden: [T, D] after the final norm
        h = self._embed(input_ids.to(self.device))
        batch = self.kda_pool.batch(batch_chunks(ctx), h.shape[0])
        reps = self._replicas(h.shape[0])
        eps, up = self.cfg.rms_norm_eps, self.rotary.upcast
        for layer in self.layers:
            x = rms_norm(h, layer.input_norm, eps, up)
            if isinstance(layer.attn, KdaAttention):
                h = h + layer.attn.forward(x, batch, self.kda_pool)
            else:
                h = h + layer.attn.forward(x, None, None, ctx)  # type: ignore[arg-type]
            h = h + self._mlp(layer.mlp, rms_norm(h, layer.post_norm, eps, up), reps)
        return rms_norm(h, self.norm, eps, up)


def _mlp_names(name: str, with_mlp: set[str]) -> str:
    # "<layer>.mlp.<rest>" -> the stored name: 'mlp.' where the checkpoint has it, else
    # 'block_sparse_moe.' (save_pretrained renames dense MLPs too); expert projections renamed
    layer, rest = name.split(".mlp.", 1)
    return _to_ckpt(f"{layer}.{'mlp' if layer in with_mlp else 'block_sparse_moe'}.{rest}")


def _to_ckpt(name: str) -> str:
    # DeepSeek expert names -> Moonshot's: experts.{e}.gate_proj.weight -> experts.{e}.w1.weight
    if ".experts." not in name:
        return name
    head, proj, tail = name.rsplit(".", 2)
    return f"{head}.{_EXPERT_NAMES.get(proj, proj)}.{tail}"


def checkpoint_wants(hc: HybridConfig, ps: ParallelState, s: Shards, prefix: str, head: str,
                     upcast: torch.dtype, with_mlp: set[str],
                     flat_a_log: bool = False) -> tuple[list[Want], dict[str, str]]:
    """(checkpoint wants, our tensor name -> checkpoint name) for every tensor of this rank.

    with_mlp: layer prefixes ('model.layers.0') whose MLP is stored under 'mlp.' rather than
    'block_sparse_moe.'; flat_a_log: A_log stored as [H] rather than [1, 1, H, 1]."""
    cfg, D, V = hc.mla, hc.mla.hidden_size, hc.mla.vocab_size
    ours = [Want(prefix + EMBED, (V, D), 0, s.vocab_start, s.vocab_end), Want(prefix + "norm.weight", (D,))]
    if head != prefix + EMBED:
        ours.append(Want(head, (V, D), 0, s.vocab_start, s.vocab_end))
    for i in range(len(hc.layer_kinds)):
        p = f"{prefix}layers.{i}."
        ours += [Want(p + "input_layernorm.weight", (D,)), Want(p + "post_attention_layernorm.weight", (D,))]
        if i in hc.mla_layers:
            ours += attention_wants(cfg, p + "self_attn.", s)
        else:
            ours += kda_wants(hc, p + "self_attn.", ps.attn_tp.size, ps.attn_tp.rank, upcast, flat_a_log)
        if i in hc.moe_layers:
            ours += moe_wants(cfg, p + "mlp.", s, upcast)
        else:
            ours += mlp_wants(p + "mlp.", D, cfg.intermediate_size, s.tp_size, s.tp_rank, "intermediate_size")
    names = {w.name: _mlp_names(w.name, with_mlp) if ".mlp." in w.name else w.name for w in ours}
    return [Want(names[w.name], w.shape, w.dim, w.start, w.end, w.dtype) for w in ours], names


def _flat_a_log(hc: HybridConfig, ckpt: Checkpoint, prefix: str) -> bool:
    # the first KDA layer's stored A_log shape decides for all (read from the safetensors header only)
    if not hc.kda_layers:
        return False
    name = f"{prefix}layers.{hc.kda_layers[0]}.self_attn.A_log"
    if name not in ckpt.where:
        return False  # reported as a missing tensor by the read
    with safe_open(str(ckpt.where[name]), framework="pt") as f:
        return len(f.get_slice(name).get_shape()) == 1


def build(m: ModelLoad) -> KimiLinearModel:
    """The Kimi Linear family's builder (plan/model_registry.py)."""
    if m.synthetic is not None:
        raise ModelLoadError("synthetic weights: DeepSeek-V2/V3 and Kimi K2 only, not a hybrid (Kimi Linear) "
                             "model")
    hc = hybrid_config(m.parsed)
    s = plan_shards(hc.mla, m.ps, m.replicate_q)
    return load_kimi_linear(hc, Checkpoint(m.path), m.ps, s, m.dtype, m.device, m.upcast, m.progress,
                            m.kda_max_requests or DEFAULT_KDA_REQUESTS)


def load_kimi_linear(hc: HybridConfig, ckpt: Checkpoint, ps: ParallelState, s: Shards, dtype: torch.dtype,
                     device: torch.device | str, upcast: torch.dtype,
                     progress: Callable[[int, int], None] | None, max_requests: int) -> KimiLinearModel:
    """This rank's KimiLinearModel."""
    prefix, head = ckpt.language_model_names(hc.mla.tie_word_embeddings)
    with_mlp = {k.split(".mlp.", 1)[0] for k in ckpt.where if ".mlp." in k}
    wants, names = checkpoint_wants(hc, ps, s, prefix, head, upcast, with_mlp, _flat_a_log(hc, ckpt, prefix))
    read = ckpt.read(wants, dtype, device, progress)
    t = {ours: read[theirs] for ours, theirs in names.items()}
    del read     # t holds the only references: what a layer takes over (stacked experts) is freed
    rotary, scale, group = NoRotary(upcast), softmax_scale(hc.mla), ps.attn_tp.group
    h0, h1 = kda_heads(hc, ps.attn_tp.size, ps.attn_tp.rank)
    layers = []
    for i in range(len(hc.layer_kinds)):
        p = f"{prefix}layers.{i}."
        if i in hc.mla_layers:
            attn = MlaAttention(hc.mla, hc.mla_layers.index(i), p + "self_attn.", t, s, rotary, scale, group)
        else:
            attn = KdaAttention(hc, hc.kda_layers.index(i), p + "self_attn.", t, h1 - h0, upcast, group)
        mlp = MoE(hc.mla, p + "mlp.", t, s) if i in hc.moe_layers else DenseMLP(p + "mlp.", t)
        layers.append(Layer(t[p + "input_layernorm.weight"], attn, t[p + "post_attention_layernorm.weight"],
                            mlp))
    pool_args = dict(max_requests=max_requests, kda_layers=len(hc.kda_layers), heads=h1 - h0,
                     head_dim=hc.kda.head_dim, conv_kernel=hc.kda.conv_kernel, dtype=dtype,
                     state_dtype=upcast, device=device)
    return KimiLinearModel(hc, ps, s, t[prefix + EMBED], t[head], t[prefix + "norm.weight"], layers, rotary,
                           pool_args)
