"""The attention backends the runtime chooses between: the interface (base.py) and one file per kernel.

A file registers its backend object when imported; the line below imports the built-in ones, in the order
their blockers are asked (the measured table weighs them in plan/attention_names.py's order either way).
"""
from dcpctl.runtime.attention.backends.base import (ABSORBED, KINDS, MHA, REGISTRY, Absorbed, Backend, Call,
                                                    Kernel, Mha, get, of_kind, reference, register, run,
                                                    unregister)
from dcpctl.runtime.attention.backends import (absorbed_triton, absorbed_flashinfer, absorbed_flashmla,  # noqa: F401
                                               absorbed_torch, mha_cudnn, mha_torch)

__all__ = ["ABSORBED", "KINDS", "MHA", "REGISTRY", "Absorbed", "Backend", "Call", "Kernel", "Mha", "get",
           "of_kind", "reference", "register", "run", "unregister"]
