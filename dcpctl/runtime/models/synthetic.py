"""Synthetic weights: this rank's slice of every wanted tensor, generated on the device (no checkpoint on
disk).

    source = SyntheticWeights(quant, keep_fp8, seed)     # beside checkpoint.Checkpoint, the same two calls
    prefix, head = source.language_model_names(tie_word_embeddings)
    tensors = source.read(wants, dtype, device)           # {want.name: Tensor | Fp8Weight}

The loader asks it for exactly what it would read from a checkpoint (its list of `Want`s), and it answers in
the form the checkpoint reader would: a want marked `fp8_ok` of a block-FP8 model whose slice starts and ends
on scale blocks stays FP8 (e4m3 values and their fp32 block factors) where `keep_fp8`; everything else comes
in the want's dtype (the router's fp32) or the model's, as a dequantized weight would.  So the bytes loaded
are the bytes the checkpoint would load, which plan/weights.py predicts.

Values are those of a freshly initialized model, so activations stay in range and a MoE router and the
softmax see ordinary inputs: matrices N(0, 1/fan_in) (FP8: N(0, 1) in e4m3, every block factor fan_in^-1/2),
embeddings N(0, 1), norms 1, the router's correction bias 0.  Each is one `normal_` (or `fill_`) on the device
into `torch.empty`, so tens of GiB take seconds.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from dcpctl.runtime.models.checkpoint import EMBED, Want
from dcpctl.runtime.models.quant import BlockFp8, Fp8Weight

PREFIX = "model."
HEAD = "lm_head.weight"


class SyntheticWeights:
    def __init__(self, quant: BlockFp8 | None, keep_fp8: bool, seed: int = 0) -> None:
        self.quant, self.keep_fp8, self.seed = quant, keep_fp8, seed

    def language_model_names(self, tie_word_embeddings: bool) -> tuple[str, str]:
        """(language-model prefix, lm_head tensor name), named as a Hugging Face DeepSeek checkpoint names
        them."""
        return PREFIX, PREFIX + EMBED if tie_word_embeddings else HEAD

    def read(self, wants: list[Want], dtype: torch.dtype, device: torch.device | str,
             progress: Callable[[int, int], None] | None = None) -> dict[str, torch.Tensor | Fp8Weight]:
        g = torch.Generator(device=device).manual_seed(self.seed)
        out: dict[str, Any] = {}
        for i, w in enumerate(wants):
            out[w.name] = self._one(w, dtype, torch.device(device), g)
            if progress is not None and (i + 1) % 512 == 0:
                progress(i + 1, len(wants))
        if progress is not None:
            progress(len(wants), len(wants))
        return out

    def _one(self, w: Want, dtype: torch.dtype, device: torch.device,
             g: torch.Generator) -> torch.Tensor | Fp8Weight:
        # -> the slice [w.start, w.end) along w.dim of a tensor of full shape w.shape
        shape = list(w.shape)
        if w.dim is not None:
            shape[w.dim] = w.end - w.start
        if len(shape) == 1:     # norms 1; the router's correction bias 0
            fill = 0.0 if w.name.endswith("e_score_correction_bias") else 1.0
            return torch.empty(shape, dtype=w.dtype or dtype, device=device).fill_(fill)
        if w.name.endswith(EMBED):
            return torch.empty(shape, dtype=w.dtype or dtype, device=device).normal_(generator=g)
        std = w.shape[1] ** -0.5
        if self._kept_fp8(w):
            return self._fp8(w, shape, std, device, g)
        return torch.empty(shape, dtype=w.dtype or dtype, device=device).normal_(std=std, generator=g)

    def _kept_fp8(self, w: Want) -> bool:
        # the checkpoint reader's rule (Want.stays_fp8), for the 2-D weights a block-FP8 checkpoint holds
        return self.quant is not None and len(w.shape) == 2 and w.stays_fp8(self.quant.block, self.keep_fp8)

    def _fp8(self, w: Want, shape: list[int], std: float, device: torch.device,
             g: torch.Generator) -> Fp8Weight:
        # e4m3 values N(0, 1) and one fp32 factor per (b0 x b1) block of the slice (it starts on a block
        # bound)
        assert self.quant is not None
        b0, b1 = self.quant.block
        w8 = (torch.empty(shape, dtype=torch.bfloat16, device=device).normal_(generator=g)
              .to(torch.float8_e4m3fn))
        scale = torch.full((-(-shape[0] // b0), -(-shape[1] // b1)), std, dtype=torch.float32, device=device)
        return Fp8Weight(w8, scale, (b0, b1))
