"""Import FlashInfer (flashinfer_setup) and JIT-build its fa3 MLA decode module once, timed.

    python3 -m benchmarks.flashinfer.jit
"""
import time

import torch

from dcpctl.runtime.attention.flashinfer_setup import load


def main() -> None:
    fi, why = load()
    print("load:", why)
    t0 = time.time()
    fi.mla.get_batch_mla_module("fa3", torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.int32, 512, 64,
                                False)
    print(f"JIT fa3 MLA module: {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
