"""What FlashMLA's kernel returns for a zero-length row (its own tests never pass one): recorded, not
asserted.

    python3 -m benchmarks.flashmla.zero_len_probe OUT.json     (an sm_90 GPU, FlashMLA built: flashmla_setup)

Three rows of lengths 0, 100, 0 at 128 heads; writes the lse values of row 0, whether its o is finite, and row
1's lse error against fp32 attention.  Run in a process of its own under a timeout (a device call): a fault or
a hang costs only this probe.  The runtime does not depend on the answer (flashmla.decode_rows).
"""
import json
import math
import sys

import torch

from dcpctl.runtime.attention.flashmla_setup import load


def main(out: str) -> None:
    mod, why = load()
    print("load:", why)
    g = torch.Generator(device="cuda").manual_seed(0)
    pool = torch.randn(13, 64, 576, device="cuda", generator=g).bfloat16()
    table = torch.arange(1, 13, dtype=torch.int32, device="cuda").view(3, 4)
    lens = torch.tensor([0, 100, 0], dtype=torch.int32, device="cuda")
    q = torch.randn(3, 1, 128, 576, device="cuda", generator=g).bfloat16()
    meta, splits = mod.get_mla_metadata(lens, 128, 1)
    o, lse = mod.fwd_kvcache_mla(q, pool.unsqueeze(2), 512, lens, table, 1 / math.sqrt(192), False, meta,
                                 splits)
    torch.cuda.synchronize()
    kv = pool[1:5].flatten(0, 1)[:100].float()
    want = torch.logsumexp(q[1, 0].float() @ kv.T / math.sqrt(192), -1)
    doc = {"lse_row0_values": sorted({float(x) for x in lse[0].flatten().tolist()})[:4],
           "o_row0_finite": bool(torch.isfinite(o[0]).all()),
           "lse_row1_abs_err": float((lse[1].flatten() - want).abs().max())}
    print(doc)
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
