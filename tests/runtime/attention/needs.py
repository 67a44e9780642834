"""GPU tests of an optional kernel skip, with the kernel's own reason, where it does not run here (never
fail)."""
import pytest
import torch

from dcpctl.runtime.attention import backends

R, V, PAGE = 576, 512, 64      # the DeepSeek/Kimi latent row (512 + 64) in pages of 64: what FlashMLA reads


def need_backend(name: str, heads: int = 128) -> None:
    """Skip unless the absorbed backend `name` runs on this GPU for a bf16 pool of pages of 64 and the 512 +
    64 row: its blocker's sentence is the reason (FlashMLA not built, FlashInfer not installed, not sm_90,
    ...)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    q = torch.zeros(1, heads, R, dtype=torch.bfloat16, device="cuda")
    pool = torch.zeros(1, PAGE, R, dtype=torch.bfloat16, device="cuda")
    why = backends.get(backends.ABSORBED, name).blocker(q, pool, V)
    if why is not None:
        pytest.skip(f"{name} does not run here: {why}")
