"""Block-wise FP8 weights (DeepSeek-V3 / V3.1, Kimi K2): parsed from config.json, kept in FP8 on GPUs.

    read_quantization(cfg: dict, file: Path) -> BlockFp8 | None   ModelLoadError for other methods
    dequantize(w8, scale_inv, rows, cols, block) -> float32 slice of the real weight
    fp8_compute(device, block) -> (keep, why)  whether linear layers stay FP8 here; decided once
    Fp8Weight(w8, scale, block); linear(x, w)  a linear layer over a plain or a block-FP8 weight
    concat_rows(a, b), rows(w, r0, r1)         gate and up as one weight, and views of its halves

A quantized weight `<name>.weight` is float8_e4m3fn, [out, in]; its `<name>.weight_scale_inv` is
float32 [ceil(out/b0), ceil(in/b1)] and block (i, j) holds the factor for rows i*b0..(i+1)*b0-1,
columns j*b1..(j+1)*b1-1: real = fp8 * scale_inv (DeepSeek's `weight_dequant`). Tensors stored in
any other dtype (norms, embeddings, lm_head, the MoE router) are simply unquantized.
"""
from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from dcpctl.plan.weights import FP8_MIN_SM, fp8_block_ok
from dcpctl.runtime.kernels import gemm16, gemm_warm
from dcpctl.runtime.errors import ModelLoadError

FP8_DTYPES = ("F8_E4M3",)  # safetensors' name for torch.float8_e4m3fn
SUPPORTED_METHODS = ("fp8",)
SCALE_SUFFIX = "_scale_inv"


@dataclass(frozen=True)
class BlockFp8:
    block: tuple[int, int]  # (rows, columns) covered by one weight_scale_inv entry

    def scale_shape(self, shape: tuple[int, ...]) -> tuple[int, int]:
        return -(-shape[0] // self.block[0]), -(-shape[1] // self.block[1])


def scale_name(weight: str) -> str:
    return weight + SCALE_SUFFIX  # 'x.weight' -> 'x.weight_scale_inv'


def read_quantization(cfg: dict[str, Any], file: Path) -> BlockFp8 | None:
    """None for an unquantized model; block-wise fp8 as DeepSeek ships it; ModelLoadError otherwise."""
    q = cfg.get("quantization_config")
    if not q:
        return None
    if not isinstance(q, dict):
        raise ModelLoadError(f"{file}: quantization_config must be a mapping, got {q!r}")
    method = q.get("quant_method")
    if method not in SUPPORTED_METHODS:
        raise ModelLoadError(f"{file}: quantized checkpoints are not supported by the bundled runtime "
                             f"except block-wise fp8; quant_method {method!r} is not "
                             f"(supported: {', '.join(SUPPORTED_METHODS)} with weight_block_size)")
    if q.get("fmt", "e4m3") != "e4m3":
        raise ModelLoadError(f"{file}: fp8 fmt {q.get('fmt')!r} is not supported; supported: 'e4m3'")
    block = q.get("weight_block_size")
    if block is None:
        raise ModelLoadError(f"{file}: quantized checkpoints are not supported by the bundled runtime "
                             f"except block-wise fp8; quant_method 'fp8' has no weight_block_size "
                             f"(per-tensor fp8)")
    if (not isinstance(block, (list, tuple)) or len(block) != 2
            or not all(isinstance(b, int) and b > 0 for b in block)):
        raise ModelLoadError(f"{file}: weight_block_size must be two positive integers, got {block!r}")
    return BlockFp8((block[0], block[1]))


def dequantize(w8: Any, scale_inv: Any, rows: tuple[int, int], cols: tuple[int, int],
               block: tuple[int, int]) -> Tensor:
    # w8: safetensors slice [out, in] fp8  scale_inv: slice [ceil(out/b0), ceil(in/b1)] -> [r1-r0, c1-c0] fp32
    # the wanted slice may start and end inside a block:
    # | rows of the slice | scale rows read          | offset into the expanded scales |
    # | r0 .. r1-1        | r0//b0 .. ceil(r1/b0)-1  | r0 - (r0//b0)*b0                |
    (r0, r1), (c0, c1), (b0, b1) = rows, cols, block
    w = w8[r0:r1, c0:c1].to(torch.float32)
    s = scale_inv[r0 // b0:-(-r1 // b0), c0 // b1:-(-c1 // b1)].to(torch.float32)
    s = s.repeat_interleave(b0, dim=0).repeat_interleave(b1, dim=1)
    dr, dc = r0 - r0 // b0 * b0, c0 - c0 // b1 * b1
    return w * s[dr:dr + r1 - r0, dc:dc + c1 - c0]


@dataclass
class Fp8Weight:
    """A block-FP8 weight as stored: w8 [N, K] (or [E, N, K] stacked experts) e4m3 and its fp32 factors
    scale [ceil(N/b0), ceil(K/b1)] (+E); real = w8 * scale[n // b0, k // b1]."""

    w8: Tensor
    scale: Tensor
    block: tuple[int, int]

    @property
    def shape(self) -> torch.Size:
        return self.w8.shape

    @property
    def is_cuda(self) -> bool:
        return self.w8.is_cuda

    def __getitem__(self, j: int) -> "Fp8Weight":
        return Fp8Weight(self.w8[j], self.scale[j], self.block)


Weight = Union[Tensor, Fp8Weight]


def stack(ws: list[Weight]) -> Weight:
    """[E, ...] of equally shaped weights (the grouped MoE path)."""
    if isinstance(ws[0], Fp8Weight):
        return Fp8Weight(torch.stack([w.w8 for w in ws]), torch.stack([w.scale for w in ws]), ws[0].block)
    return torch.stack(ws)


def concat_rows(a: Weight, b: Weight) -> Weight | None:
    """a's rows then b's as one weight ([..., Na + Nb, K]: gate and up in one GEMM), or None where they do
    not concatenate: a block-FP8 a ending inside a scale block (its last block would mix both), mixed
    kinds."""
    if isinstance(a, Fp8Weight) and isinstance(b, Fp8Weight):
        if a.shape[-2] % a.block[0] or a.block != b.block:
            return None
        return Fp8Weight(torch.cat([a.w8, b.w8], -2), torch.cat([a.scale, b.scale], -2), a.block)
    if isinstance(a, Tensor) and isinstance(b, Tensor) and a.dtype == b.dtype:
        return torch.cat([a, b], -2)
    return None


def rows(w: Weight, r0: int, r1: int) -> Weight:
    """Rows r0..r1-1 ([..., r1 - r0, K]) as a view; block-FP8: r0 on a scale-block bound."""
    if isinstance(w, Fp8Weight):
        b0 = w.block[0]
        return Fp8Weight(w.w8[..., r0:r1, :], w.scale[..., r0 // b0:-(-r1 // b0), :], w.block)
    return w[..., r0:r1, :]


def linear(x: Tensor, w: Weight) -> Tensor:
    # x: [T, K]  w: [N, K] -> [T, N]; a block-FP8 weight goes through the block-scaled GEMM
    if isinstance(w, Fp8Weight):
        return grouped_linear(x, w, None)
    if gemm_warm.LOG is not None:    # the engine's warm-up is recording the GEMMs to warm (gemm_warm.py)
        gemm_warm.LOG.note_linear(x, w)
    t = gemm16.pick(x, w)    # a few rows of a measured shape: dcpctl's split-K kernel (else None)
    return F.linear(x, w) if t is None else gemm16.linear16(x, w, t)


def grouped_linear(x: Tensor, w: Fp8Weight, ends: Tensor | None, rows: int | None = None) -> Tensor:
    # x: [R, K] rows sorted by expert, w: [E, N, K], ends: [E] int32 -> [R, N]; ends None: one matrix; rows:
    # the rows per expert the kernel is chosen by (fp8_gemm.fp8_matmul)
    from dcpctl.runtime.kernels.fp8_gemm import fp8_matmul
    if x.shape[0] == 0:
        return x.new_zeros((0, w.shape[-2]))
    return fp8_matmul(x, w.w8, w.scale, w.block, ends, rows=rows)


@functools.lru_cache(maxsize=None)
def fp8_compute(device: str, block: tuple[int, int]) -> tuple[bool, str]:
    """(keep FP8, why): linear layers stay block-FP8 on CUDA GPUs of sm_89 and newer (e4m3 tensor cores)
    with Triton and blocks the GEMM takes (plan/weights.py asks the same of a hardware profile); everywhere
    else they are dequantized to the compute dtype at load."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return (False,
                f"{dev.type}: no FP8 GEMM here, so block-FP8 weights are dequantized to the compute dtype at "
                "load")
    from dcpctl.runtime.gpu import gpu_facts
    major, minor = gpu_facts(dev).sm
    if major * 10 + minor < FP8_MIN_SM:
        return False, (f"sm_{major}{minor} has no e4m3 tensor cores (sm_89 and newer do), so block-FP8 "
                       "weights are dequantized to the compute dtype at load")
    if importlib.util.find_spec("triton") is None:
        return (False,
                "Triton is not installed, so block-FP8 weights are dequantized to the compute dtype at load")
    if not fp8_block_ok(block):
        return False, (f"weight blocks {block[0]}x{block[1]}: the FP8 GEMM needs a power-of-two block width "
                       ">= 16, so block-FP8 weights are dequantized to the compute dtype at load")
    from dcpctl.runtime.kernels.fp8_gemm import activation_mode, methods_note, tiles_note
    return True, (f"block-FP8 linear layers stay FP8 on sm_{major}{minor}; "
                  f"{methods_note(activation_mode(), dev)} (w8a16: e4m3 weight tiles converted in "
                  "registers, so outputs match the dequantized weights but for the order of fp32 sums; w8a8: "
                  f"activations quantized 1x{block[1]} to e4m3 as SGLang and vLLM do); kv_b_proj is "
                  f"dequantized once at load for absorbed MLA; {tiles_note(dev)}")
