"""Safetensors checkpoint reader that materializes only the requested shard of each tensor.

    ckpt = Checkpoint(path, quant=None)          # single file, index.json, or a set of *.safetensors
    tensors = ckpt.read(wants, dtype, device, progress)   # {want.name: Tensor}

Every tensor's full on-disk shape is checked against the shape the config implies before any
slice is read; mismatches and missing files or tensors raise ModelLoadError. With `quant`
(block-wise fp8, see quant.py) an fp8 tensor is dequantized from its slice and the scale blocks
that cover it, so a rank never materializes more of a quantized weight than its shard. With
`keep_fp8` a want marked `fp8_ok` (a linear layer's weight) whose slice starts and ends on block
boundaries stays FP8: an Fp8Weight of its e4m3 slice and the scale blocks of that slice.
"""
from __future__ import annotations

import json
from collections import defaultdict
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from safetensors import safe_open

from dcpctl.plan.weights import on_blocks
from dcpctl.runtime.models.config import ModelLoadError
from dcpctl.runtime.models.quant import FP8_DTYPES, BlockFp8, Fp8Weight, dequantize, scale_name

INDEX = "model.safetensors.index.json"
EMBED = "embed_tokens.weight"
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Want:
    """One tensor to read: full shape from config, optional [start, end) slice along `dim`."""

    name: str
    shape: tuple[int, ...]
    dim: int | None = None
    start: int = 0
    end: int = 0
    dtype: torch.dtype | None = None  # overrides the model dtype (router weights stay fp32)
    fp8_ok: bool = False  # a linear layer's weight: may stay block-FP8 (Checkpoint.keep_fp8)

    def bounds(self) -> list[tuple[int, int]]:
        """[start, end) of the slice read, per axis."""
        out = [(0, n) for n in self.shape]
        if self.dim is not None:
            out[self.dim] = (self.start, self.end)
        return out

    def stays_fp8(self, block: tuple[int, int], keep_fp8: bool) -> bool:
        """Whether this block-FP8 weight's slice is kept in FP8 (else dequantized): FP8 is kept, the weight
        may stay FP8, and the slice starts and ends on block bounds on every axis."""
        return keep_fp8 and self.fp8_ok and all(on_blocks(*b, n, k)
                                                for b, n, k in zip(self.bounds(), self.shape, block))


class Checkpoint:
    def __init__(self, path: Path, quant: BlockFp8 | None = None, keep_fp8: bool = False):
        self.path, self.quant, self.keep_fp8 = Path(path), quant, keep_fp8
        self.where = self._index()  # tensor name -> file

    def _index(self) -> dict[str, Path]:
        index = self.path / INDEX
        if index.exists():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
            except (json.JSONDecodeError, KeyError) as e:
                raise ModelLoadError(f"{index} is not a safetensors index with a weight_map: {e}") from e
            for file in sorted(set(weight_map.values())):
                if not (self.path / file).exists():
                    raise ModelLoadError(f"checkpoint shard {file} listed in {INDEX} is missing from "
                                         f"{self.path}")
            return {k: self.path / v for k, v in weight_map.items()}
        files = sorted(self.path.glob("*.safetensors"))
        if not files:
            raise ModelLoadError(f"no *.safetensors weights in {self.path}")
        where: dict[str, Path] = {}
        for file in files:
            with _open(file) as f:
                where.update({k: file for k in f.keys()})
        return where

    def find_suffix(self, suffix: str) -> str | None:
        """The name ending in `suffix` with the shortest prefix (the language model's own)."""
        hits = sorted((k for k in self.where if k == suffix or k.endswith("." + suffix)), key=len)
        return hits[0] if hits else None

    def language_model_names(self, tie_word_embeddings: bool) -> tuple[str, str]:
        """(language-model prefix such as 'model.', lm_head tensor name) as stored in the checkpoint."""
        embed = self.find_suffix(EMBED)
        if embed is None:
            raise ModelLoadError(f"no tensor named *{EMBED} in the checkpoint at {self.path}")
        head = self.find_suffix("lm_head.weight")
        if head is None and not tie_word_embeddings:
            raise ModelLoadError(f"no lm_head.weight in the checkpoint at {self.path} and "
                                 "tie_word_embeddings is false")
        return embed[:-len(EMBED)], head or embed

    def read(self, wants: list[Want], dtype: torch.dtype, device: torch.device | str,
             progress: Progress | None = None) -> dict[str, torch.Tensor | Fp8Weight]:
        by_file: dict[Path, list[Want]] = defaultdict(list)
        for w in wants:
            if w.name not in self.where:
                raise ModelLoadError(f"tensor {w.name} is not in the checkpoint at {self.path}")
            by_file[self.where[w.name]].append(w)
        out: dict[str, torch.Tensor | Fp8Weight] = {}
        files = sorted(by_file)
        for i, file in enumerate(files):
            with ExitStack() as stack:  # this file, and any other that holds one of its weights' scales
                handles: dict[Path, Any] = {}

                def handle(f: Path) -> Any:
                    if f not in handles:
                        handles[f] = stack.enter_context(_open(f))
                    return handles[f]

                for w in by_file[file]:
                    t = self._read_one(handle, file, w)
                    out[w.name] = Fp8Weight(t.w8.to(device), t.scale.to(device), t.block) \
                        if isinstance(t, Fp8Weight) else t.to(device=device, dtype=w.dtype or dtype)
            if progress is not None:
                progress(i + 1, len(files))
        return out

    def _read_one(self, handle: Callable[[Path], Any], file: Path, w: Want) -> torch.Tensor | Fp8Weight:
        # -> w.shape narrowed to [w.start, w.end) along w.dim; fp8 weights kept or dequantized to float32
        sl = handle(file).get_slice(w.name)
        got = tuple(sl.get_shape())
        if got != tuple(w.shape):
            raise ModelLoadError(f"tensor {w.name} in {file.name} has shape {list(got)}, "
                                 f"expected {list(w.shape)} from config.json")
        if sl.get_dtype() in FP8_DTYPES:
            return self._dequantized(handle, file, w, sl)
        if w.dim is None:
            return sl[:]
        return sl[tuple([slice(None)] * w.dim + [slice(w.start, w.end)])]

    def _dequantized(self, handle: Callable[[Path], Any], file: Path, w: Want,
                     sl: Any) -> torch.Tensor | Fp8Weight:
        # w8 [out, in] + scale_inv [ceil(out/b0), ceil(in/b1)] -> this want's slice, FP8 kept or float32
        if self.quant is None:
            raise ModelLoadError(f"tensor {w.name} in {file.name} is stored as fp8 ({sl.get_dtype()}) but "
                                 f"config.json has no quantization_config")
        if len(w.shape) != 2:
            raise ModelLoadError(f"tensor {w.name} in {file.name} is fp8 with shape {list(w.shape)}; "
                                 f"block-wise fp8 weights must be 2-D")
        sname = scale_name(w.name)
        if sname not in self.where:
            raise ModelLoadError(f"tensor {w.name} is fp8 but its scale {sname} is not in the checkpoint "
                                 f"at {self.path}")
        ssl = handle(self.where[sname]).get_slice(sname)
        want_s = self.quant.scale_shape(w.shape)
        if tuple(ssl.get_shape()) != want_s:
            raise ModelLoadError(f"tensor {sname} in {self.where[sname].name} has shape "
                                 f"{list(ssl.get_shape())}, expected {list(want_s)} for weight "
                                 f"{list(w.shape)} in blocks of {list(self.quant.block)}")
        bounds, block = w.bounds(), self.quant.block
        if w.stays_fp8(block, self.keep_fp8):
            (r0, r1), (c0, c1) = bounds
            scale = ssl[r0 // block[0]:-(-r1 // block[0]), c0 // block[1]:-(-c1 // block[1])]
            # clone: safetensors' fp8 row slices are views that would pin the whole tensor
            return Fp8Weight(sl[r0:r1, c0:c1].clone(), scale.to(torch.float32).clone(), block)
        return dequantize(sl, ssl, bounds[0], bounds[1], block)


@contextmanager
def _open(file: Path) -> Iterator[Any]:
    try:
        handle = safe_open(str(file), framework="pt")
    except Exception as e:  # noqa: BLE001 - a corrupt header of any kind is one clear sentence
        raise ModelLoadError(f"cannot read safetensors file {file}: {e}") from e
    with handle as f:
        yield f
