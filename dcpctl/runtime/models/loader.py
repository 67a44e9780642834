"""Build a sharded DeepseekModel (or KimiLinearModel) from a Hugging Face checkpoint directory.

    load_model(path, ps: ParallelState, replicate_q: bool, dtype: torch.dtype, device,
               progress: Callable[[int, int], None] | None = None) -> DeepseekModel

The model registry (plan/model_registry.py) names the builder per family: DeepSeek-V2/V3 and Kimi K2 build a
DeepseekModel here (load_deepseek), Kimi Linear (`kimi_linear`) a KimiLinearModel whose KDA state pool holds
`kda_max_requests` slots (kimi_linear.build).
Block-wise fp8 checkpoints (DeepSeek-V3 / Kimi K2 releases) keep their linear layers in FP8 on GPUs
with e4m3 tensor cores (quant.fp8_compute decides, once, with a note) and are dequantized to `dtype`
per shard at load elsewhere; kv_b_proj is always dequantized (absorbed MLA splits it).

`replicate_q` is the launch config's decisions.dcp_replicate_q_proj (the DCP group's query computed locally).
`progress(done, total)` is called once per safetensors file read. Raises ModelLoadError for an
unsupported config, a missing shard file or tensor, or a tensor whose shape disagrees with config.
MTP layers stored after `num_hidden_layers` are never read.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch
from torch import Tensor

from dcpctl.runtime.kernels import gemm16, pdl
from dcpctl.runtime.models.attention import MlaAttention, attention_wants
from dcpctl.runtime.models.build import ModelLoad, builder, mla_part
from dcpctl.runtime.kernels.blas import choose_blas
from dcpctl.runtime.models.checkpoint import EMBED, Checkpoint, Want
from dcpctl.runtime.models.config import MlaConfig, mla_config, read_model_config
from dcpctl.runtime.models.deepseek import DeepseekModel, Layer
from dcpctl.runtime.kernels.fusions import Fusions
from dcpctl.runtime.models.mlp import DenseMLP, MoE, mlp_wants, moe_wants
from dcpctl.runtime.models.ops import upcast_dtype
from dcpctl.runtime.models.quant import fp8_compute, read_quantization
from dcpctl.runtime.notes import note_once
from dcpctl.runtime.models.rope import Rotary, softmax_scale
from dcpctl.runtime.models.shards import Shards, plan_shards
from dcpctl.runtime.models.synthetic import SyntheticWeights
from dcpctl.runtime.parallel import ParallelState

def load_model(path: str | Path, ps: ParallelState, replicate_q: bool, dtype: torch.dtype,
               device: torch.device | str = "cpu",
               progress: Callable[[int, int], None] | None = None, hf_numerics: bool = False,
               kda_max_requests: int | None = None, keep_fp8: bool | None = None,
               synthetic: int | None = None) -> DeepseekModel:
    """Read config.json and this rank's shards of every weight; see the module docstring.

    hf_numerics: keep norms, rope angles, the router (and KDA's gates, recurrence and gated norm) in
    fp32 even for float64 (bit-compatible with Hugging Face; only the oracle tests want it).
    kda_max_requests: KDA state slots of a hybrid model (concurrent requests per attention-DP
    replica; default kimi_linear.DEFAULT_KDA_REQUESTS); ignored by non-hybrid models.
    keep_fp8: None decides by the device (quant.fp8_compute); tests force it to count the bytes.
    synthetic: a seed: `path` needs only config.json, and every tensor is generated on the device in the form
    the checkpoint would load (models/synthetic.py; `dcpctl bench rank`)."""
    if not isinstance(replicate_q, bool):
        raise TypeError(f"replicate_q must be a bool (decisions.dcp_replicate_q_proj), got {replicate_q!r}")
    path = Path(path)
    choose_blas(device)
    fuse = Fusions.from_env()
    gemm16.configure(fuse.gemm16, device)
    _configure_pdl(fuse.pdl, device)
    parsed = read_model_config(path)
    upcast = upcast_dtype(dtype, hf_numerics)
    build = builder(parsed)  # the model registry's builder of this family (plan/model_registry.py)
    return build(ModelLoad(parsed, path, ps, replicate_q, dtype, device, upcast, progress, fuse,
                           kda_max_requests, keep_fp8, synthetic))


def load_deepseek(m: ModelLoad) -> DeepseekModel:
    """The DeepSeek-V2/V3 and Kimi K2 families' builder (plan/model_registry.py)."""
    parsed, path, ps, replicate_q, dtype, device = m.parsed, m.path, m.ps, m.replicate_q, m.dtype, m.device
    upcast, progress, fuse, keep_fp8, synthetic = m.upcast, m.progress, m.fuse, m.keep_fp8, m.synthetic
    cfg = mla_config(parsed)
    # quant.py parses the quantization_config mapping the one config.json parse kept as written
    quant = read_quantization({"quantization_config": parsed.quantization}, Path(parsed.source))
    keep = quant is not None and _keep_fp8(device, keep_fp8, quant.block)
    ckpt = (Checkpoint(path, quant, keep_fp8=keep)
            if synthetic is None else SyntheticWeights(quant, keep, synthetic))
    s = plan_shards(cfg, ps, replicate_q)
    prefix, head = ckpt.language_model_names(cfg.tie_word_embeddings)
    t = ckpt.read(_all_wants(cfg, s, prefix, head, upcast), dtype, device, progress)
    rotary, scale = Rotary(cfg, device, upcast), softmax_scale(cfg)
    layers = [_layer(cfg, ps, s, i, f"{prefix}layers.{i}.", t, rotary, scale, fuse)
              for i in range(cfg.num_layers)]
    return DeepseekModel(cfg, ps, s, t[prefix + EMBED], t[head], t[prefix + "norm.weight"], layers, rotary,
                         fuse)


def read_config(path: Path) -> MlaConfig:
    """Parse `path/config.json` (or a config.json path) into an MlaConfig (a hybrid's MLA part)."""
    return mla_part(read_model_config(path))


def _configure_pdl(on: bool, device: torch.device | str) -> None:
    why_not = pdl.configure(on, device)
    if pdl.ON:
        note_once("Launches: the step's Triton kernels start before the kernel before them ends "
                  "(programmatic dependent launch; DCPCTL_UNFUSED=pdl: plain launches)")
    elif why_not:
        note_once(f"Launches: plain, one kernel after the other ({why_not})")


def _keep_fp8(device: torch.device | str, forced: bool | None, block: tuple[int, int]) -> bool:
    if forced is not None:
        return forced
    keep, why = fp8_compute(str(torch.device(device)), block)
    note_once(why)
    if keep:
        from dcpctl.runtime.kernels.fp8_gemm import prepare
        prepare(device)
    return keep


def _all_wants(cfg: MlaConfig, s: Shards, prefix: str, head: str, upcast: torch.dtype) -> list[Want]:
    D, V = cfg.hidden_size, cfg.vocab_size
    wants = [Want(prefix + EMBED, (V, D), 0, s.vocab_start, s.vocab_end), Want(prefix + "norm.weight", (D,))]
    if head != prefix + EMBED:
        wants.append(Want(head, (V, D), 0, s.vocab_start, s.vocab_end))
    for i in range(cfg.num_layers):
        p = f"{prefix}layers.{i}."
        wants += [Want(p + "input_layernorm.weight", (D,)), Want(p + "post_attention_layernorm.weight", (D,))]
        wants += attention_wants(cfg, p + "self_attn.", s)
        if cfg.is_moe_layer(i):
            wants += moe_wants(cfg, p + "mlp.", s, upcast)
        else:
            wants += mlp_wants(p + "mlp.", D, cfg.intermediate_size, s.tp_size, s.tp_rank,
                               "intermediate_size")
    return wants


def _layer(cfg: MlaConfig, ps: ParallelState, s: Shards, i: int, p: str, t: dict[str, Tensor],
           rotary: Rotary, scale: float, fuse: Fusions) -> Layer:
    attn = MlaAttention(cfg, i, p + "self_attn.", t, s, rotary, scale, ps.attn_tp.group, fuse)
    mlp = MoE(cfg, p + "mlp.", t, s) if cfg.is_moe_layer(i) else DenseMLP(p + "mlp.", t, fuse.swiglu)
    return Layer(t[p + "input_layernorm.weight"], attn, t[p + "post_attention_layernorm.weight"], mlp)
