"""Run by test_fp8_gemm.py in a subprocess with TRITON_INTERPRET=1: a tiny block-FP8 model with its weights
kept in FP8 (the Triton kernels, in the interpreter) against its dequantized twin, under each method.

fp16, not bf16: Triton 3.6's interpreter computes a bf16 `tl.dot` on the raw bits (a [16, 64] x [64, 32]
product off by 3e9 relative), while its fp16 and fp32 dots are right; the GPU tests run bf16.  Prefill logits
of two prompts through 3 layers (one dense, two MoE): w8a16 is the twin's arithmetic but for fp32 sum order
and the fp16 rounding of each dequantized weight, so it must stay within W8A16_BOUND; w8a8 adds the 1x64 e4m3
activation quantization, which must show (above W8A8_FLOOR), so the method really switched."""
import sys
import tempfile
from pathlib import Path

import torch
from tests.runtime.interp import patch_index

patch_index()

from dcpctl.contract.launch_config import RuntimeSection  # noqa: E402
from dcpctl.runtime import settings  # noqa: E402
from dcpctl.runtime.models import load_model  # noqa: E402
from dcpctl.runtime.models.quant import Fp8Weight  # noqa: E402
from dcpctl.runtime.tiny import write_tiny_model  # noqa: E402
from tests.runtime.ref_context import greedy_run  # noqa: E402
from tests.runtime.models.test_model_fp8 import write_fp8  # noqa: E402
from tests.runtime.models.test_model_load import fake_state  # noqa: E402
from tests.runtime.models.test_weight_bytes import SHAPE  # noqa: E402

W8A16_BOUND, W8A8_FLOOR = 5e-3, 2e-2
PROMPTS = [[256, 72, 101, 108, 108, 111], [256, 5, 9, 200]]


def error(path: Path, mode: str) -> float:
    settings.use(RuntimeSection(fp8_gemm=mode))
    models = [load_model(path, fake_state(1, 0), False, torch.float16, "cpu", keep_fp8=k)
              for k in (True, False)]
    assert (isinstance(models[0].layers[0].attn.q_b, Fp8Weight)
            and not isinstance(models[1].layers[0].attn.q_b, Fp8Weight))
    runs = [greedy_run(m, PROMPTS, 1) for m in models]
    return max(((a.float() - b.float()).abs().max() / b.float().abs().max()).item()
               for a, b in zip(runs[0][0], runs[1][0]))


def main() -> int:
    torch.manual_seed(0)
    d = Path(tempfile.mkdtemp(prefix="fp8-model-interp-"))
    bf16 = write_tiny_model(d / "bf16", torch_dtype="bfloat16", **SHAPE)
    (d / "fp8").mkdir()
    path = write_fp8(bf16, d / "fp8" / "ckpt", block=(64, 64))
    e16, e8 = error(path, "w8a16"), error(path, "w8a8")
    print(f"prefill logits, FP8 kept vs dequantized twin (fp16, max-abs / max): w8a16 {e16:.2e}, w8a8 "
          f"{e8:.2e}")
    return 0 if e16 < W8A16_BOUND and e8 > W8A8_FLOOR else 1


if __name__ == "__main__":
    sys.exit(main())
