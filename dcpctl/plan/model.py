"""Model spec: the planner's projection of the one config.json parse (plan/hf_config.py).

`ModelSpec` keeps only what the plan reads (shapes, counts, dtype, quantization, MLA/KDA layers);
a preset's `config` mapping holds the same keys as a config.json and goes through the same parse.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dcpctl.plan.hf_config import HfConfig, MlaShape, parse_hf_config, read_hf_config
from dcpctl.plan.hf_layers import KdaShape as KdaSpec
# bytes per element of every dtype name dcpctl meets (model dtypes, KV cache dtypes, torch names): one table
DTYPE_BYTES = {"float64": 8, "float32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "float8_e4m3fn": 1,
               "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8": 1}  # fp8: vLLM's name of fp8_e4m3


@dataclass(frozen=True)
class ModelSpec(MlaShape):
    """What the plan reads of a model: the shared sizes plus counts, dtype, quantization and layer kinds."""

    name: str
    architectures: tuple[str, ...]
    model_type: str
    num_experts_per_tok: int
    first_k_dense_replace: int
    max_position_embeddings: int
    dtype: str
    quantization: str | None
    mla_layers: tuple[int, ...]  # 0-based indices of MLA (full attention) layers
    kda: KdaSpec | None = None
    uses_rope: bool = True
    weight_block: tuple[int, int] | None = None  # block-FP8 checkpoints:
                                                 # quantization_config.weight_block_size
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def kda_layers(self) -> tuple[int, ...]:
        return tuple(i for i in range(self.num_layers) if i not in set(self.mla_layers)) if self.kda else ()

    @property
    def is_hybrid(self) -> bool:
        return self.kda is not None

    def summary(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k not in ("extra", "kda", "mla_layers")}
        d["mla_layers"] = [i + 1 for i in self.mla_layers]  # 1-based, as model cards count
        d["num_mla_layers"] = len(self.mla_layers)
        d["kda"] = dict(self.kda.__dict__) if self.kda else None
        d["kv_row_elems"] = self.kv_row_elems
        return d


def project(hc: HfConfig, name: str = "model") -> ModelSpec:
    """The ModelSpec of a parsed config.json."""
    quant = hc.quantization
    method = (str(quant.get("quant_method") or quant.get("fmt") or "quantized") if isinstance(quant, dict)
              else str(quant) if quant else None)
    return ModelSpec(
        **hc.shape(), name=name, architectures=hc.architectures, model_type=hc.model_type,
        num_experts_per_tok=hc.num_experts_per_tok or 0, first_k_dense_replace=hc.first_k_dense_replace,
        max_position_embeddings=hc.max_position_embeddings,
        dtype=hc.dtype, quantization=method, mla_layers=hc.mla_layers, kda=hc.kda if hc.kda_layers else None,
        uses_rope=hc.rope.kind != "none", weight_block=_weight_block(quant), extra={"config": hc.raw},
    )


def _weight_block(q: Any) -> tuple[int, int] | None:
    block = q.get("weight_block_size") if isinstance(q, dict) and q.get("quant_method") == "fp8" else None
    if isinstance(block, (list, tuple)) and len(block) == 2 and all(isinstance(b, int) and b > 0
                                                                    for b in block):
        return int(block[0]), int(block[1])
    return None


def spec_from_config(cfg: dict[str, Any], name: str = "model", source: str = "config.json") -> ModelSpec:
    """Build a ModelSpec from a config mapping; an unsupported model or a bad key is a UserError."""
    return project(parse_hf_config(cfg, source), name)


def spec_from_path(path: str | Path) -> ModelSpec:
    """The ModelSpec of a checkpoint directory (or a config.json path)."""
    p = Path(path)
    return project(read_hf_config(p), name=p.name if p.is_dir() else p.parent.name)
