"""Which kernel a decode step's grouped FP8 expert GEMM runs, and how many programs (thread blocks) it
launches.

    expert_programs(n, local_experts, pairs, a16)
        -> programs of one grouped GEMM of n output columns per expert

The runtime's rule (runtime/kernels/fp8_tiles.py choose_tiles; the plan cannot import it: it loads Triton) for
the routed experts' grouped GEMMs at decode, R = tokens x top_k (token, slot) rows over E_l local experts:

| kernel                                  | when                              | grid                         |
| --------------------------------------- | --------------------------------- | ---------------------------- |
| few-rows (weight-streaming, CUDA cores) | w8a16 and R <= min(64, 2 x E_l)   | min(R, E_l) slots x N / 16   |
| MMA                                     | otherwise                         | E_l experts x N / 64         |

Every program does a fixed amount of work besides its share of the weight: the few-rows kernel's find their
expert from the group ends (a prefix count over E_l), the MMA kernel's read their expert's group ends and exit
when it has no rows. At decode sizes those programs outnumber the weight's bytes' worth of work (Kimi K2 at TP
16: 464 programs per busy expert for 2.75 MB), so the step's compute has a term per program (perf_terms
`prog_s`). The tile widths are the kernels' defaults (GemvTiles.bn, Tiles.bn); the fp8_gemm tuning table's
grouped entries (measured for DeepSeek-V3's expert shapes at TP 1) may widen the MMA kernel's tiles, which
this count ignores.
"""
from __future__ import annotations

GROUPED_GEMV_ROWS = 64          # fp8_tiles.GROUPED_GEMV_ROWS
GROUPED_GEMV_PER_EXPERT = 2     # fp8_tiles.GROUPED_GEMV_PER_EXPERT
GEMV_BN = 16                    # fp8_gemv.GemvTiles.bn (fp8_tiles.DEFAULT_GEMV keeps it)
MMA_BN = 64                     # fp8_tiles.Tiles.bn (DEFAULT_TILES)


def few_rows(local_experts: int, pairs: float, a16: bool) -> bool:
    """Whether the grouped GEMM runs the few-rows kernel (else the MMA kernel)."""
    return a16 and pairs <= min(GROUPED_GEMV_ROWS, GROUPED_GEMV_PER_EXPERT * local_experts)


def expert_programs(n: int, local_experts: int, pairs: float, a16: bool) -> float:
    """Programs one grouped GEMM of `n` output columns per expert launches for `pairs` (token, slot) rows."""
    if few_rows(local_experts, pairs, a16):
        return min(pairs, local_experts) * -(-n // GEMV_BN)
    return local_experts * -(-n // MMA_BN)
