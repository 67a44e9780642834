"""The bundled runtime's local attention backends by name: one set of names, and the one mapping from the
flag.

The names are those `dcpctl plan` prints as `local_attention_backend`, the measured tables' columns
(dcpctl/tuning/attention), the registry's (runtime/attention/backends) and the runtime's notes.
`--attention-backend` takes SGLang's names; four of them fix a bundled-runtime backend:

| --attention-backend | backend      | what runs                                                             |
| ------------------- | ------------ | --------------------------------------------------------------------- |
| `triton`            | `triton`     | ours: dcpctl's split-KV MLA decode, built as Gluon (Hopper) or Triton |
|                     |              | (which build, which tiles: the backend's own, kernel_config.py)       |
| `flashinfer`        | `flashinfer` | FlashInfer's BatchMLAPagedAttentionWrapper over the same pool         |
| `flashmla`          | `flashmla`   | FlashMLA's dense decode (sm_90a, bf16, page 64) over the same pool    |
| `torch_native`      | `torch`      | the exact torch reference (never measured: runs where no kernel can)  |
| `auto`, `fa3`,      | (the table)  | the fastest measured backend per (batch, context) cell                |
| others              |              |                                                                       |

`triton` is also the portable backend: the one that runs a batch where the measured table has no cell for it,
and every batch a one-token kernel (FlashInfer, FlashMLA) cannot take.  Torch-free (the plan imports it).
"""
from __future__ import annotations

PORTABLE = "triton"          # ours: every CUDA GPU Triton runs on; where the table has no cell, and longer
                             # chunks
REFERENCE = "torch"          # the exact torch reference: where no kernel runs (CPU, float64, rows too wide)
MEASURED = ("triton", "flashinfer", "flashmla")     # the tables' columns, in the order the rule weighs them
FLAGS = {"torch_native": REFERENCE}                  # --attention-backend names that differ from the
                                                     # backend's


def from_flag(requested: str) -> str:
    """The backend name an `--attention-backend` value (or a registered backend's own name) means: the table
    above; a name that is not a backend (auto, fa3, ...) comes back as it is, and the measured table
    decides."""
    return FLAGS.get(requested, requested)

