"""The decode step's fusions: all on; `DCPCTL_UNFUSED=name,...` (or `all`) turns some off, read once at model
load, so a benchmark measures before and after in one run.  A debug switch (docs/knobs.md), not a user option:
every fusion computes the same numbers as the form it replaces (tests/runtime/kernels/test_step_fusions.py),
except head_bmm and gemm16, which sum the same fp32 products in another order (head_bmm_triton.py, gemm16.py;
the graph and eager steps agree).

| name     | fused                                                  | replaces                               |
| -------- | ------------------------------------------------------ | -------------------------------------- |
| qkv_a    | q_a_proj and kv_a_proj_with_mqa as one weight: one     | two GEMMs over the same input          |
|          | GEMM                                                   |                                        |
| q_rope   | absorbed q_nope bmm and rope write their slices of one | einsum + rope's 8 launches + cat       |
|          | buffer                                                 |                                        |
| kv_write | kv_a norm, k_pe rope and the pool write: one kernel    | norm, rope, cat, index_select, copy    |
|          | per layer                                              |                                        |
| add_norm | residual add + RMSNorm in one kernel (returns both)    | add, then norm                         |
| v_out    | o @ w_vc written head-major into the o_proj input      | einsum + a [T, H, v] reshape copy      |
| swiglu   | silu(gate) * up of a dense MLP in one kernel           | silu, then the product                 |
| embed    | the vocab-slice embedding lookup in one kernel         | offset, compares, clamp, gather, where |
| head_bmm | decode's q_nope @ w_kc and o @ w_vc per head: one      | cuBLAS batched GEMM (M <= 64 rows)     |
|          | Triton kernel                                          |                                        |
| overlap  | in a captured step: rope angles, fused KV write and q  | one stream                             |
|          | rope on a side stream (side_stream.py)                 |                                        |
| gemm16   | 16-bit linear layers of 2-32 rows of a measured shape: | cuBLAS (F.linear)                      |
|          | a split-K Triton GEMM (gemm16.py)                      |                                        |
| pdl      | sm_90+: the step's Triton and Gluon kernels launch     | plain launches                         |
|          | before the one before ends, then wait (pdl.py)         |                                        |

Kernels run on CUDA bf16/fp16 only; elsewhere a fusion keeps its data flow (buffers, `out=`) with torch ops.
"""
from __future__ import annotations

from dataclasses import dataclass

from dcpctl import knobs
from dcpctl.runtime.errors import ModelLoadError

FUSIONS = ("qkv_a", "q_rope", "kv_write", "add_norm", "v_out", "swiglu", "embed", "head_bmm", "overlap",
           "gemm16", "pdl")
ENV = "DCPCTL_UNFUSED"


@dataclass(frozen=True)
class Fusions:
    off: frozenset[str] = frozenset()

    def __getattr__(self, name: str) -> bool:
        if name in FUSIONS:
            return name not in self.off
        raise AttributeError(name)

    @staticmethod
    def from_env() -> "Fusions":
        """The fusions DCPCTL_UNFUSED leaves on (ModelLoadError for a name not in FUSIONS)."""
        raw = str(knobs.get(ENV))
        if raw == "all":
            return Fusions(frozenset(FUSIONS))
        names = {n.strip() for n in raw.split(",") if n.strip()}
        bad = sorted(names - set(FUSIONS))
        if bad:
            raise ModelLoadError(f"{ENV} names unknown fusions {bad}; valid: {', '.join(FUSIONS)} or 'all'")
        return Fusions(frozenset(names))
