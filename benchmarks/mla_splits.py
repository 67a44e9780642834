"""The local MLA decode alone (the Gluon kernel and its split merge) at 128 heads, ctx 1032, page 64: us per call
by split count at batch 8 and 32, timed as step_gemms.py times its GEMMs (its _time: calls captured in one CUDA
graph, rotating over its _copies of the pool, larger than L2 together), next to the count mla_decode picks.

usage: PYTHONPATH=. python3 benchmarks/mla_splits.py OUT.json      (a CUDA GPU with Triton's Gluon, sm_90)
The twelfth session's data (h200_mla_splits_partials_s12.json) came from this script's first version (its own
timer: 20 calls a graph, 10 replays, over 4 pools, about 40 MB at batch 8, under the 50 MB L2) and also has
`partials: result` rows: bf16 split partials, timed on the tree of 43b2c16, where $DCPCTL_SPLIT_PARTIALS chose
them (since reverted: slower).  The fifteenth session's h200_mla_splits_partials_s15.json has them again, at batch
1, 8 and 32: bf16 partials stored 16 contiguous bytes a thread through the idle first KV stage (the tree of
47c525b), slower again and reverted (9120dec).  On later trees there is only fp32, so this version times that alone.
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def main(out: str) -> None:
    import torch
    from step_gemms import _copies, _time

    from dcpctl.runtime.attention import triton_mla
    from dcpctl.runtime.attention.kernel_choice import gpu_facts
    dev = torch.device("cuda")
    rows = []
    ctx, page, H, R, V = 1032, 64, 128, 576, 512
    pages = -(-ctx // page)
    wave = gpu_facts(dev).sms * triton_mla.default_config(H).occupancy     # as mla_decode_triton sizes its splits
    for B in (8, 32):
        pools = _copies((B * pages + 1, page, R))
        bt = torch.arange(B * pages, device=dev, dtype=torch.int32).view(B, pages)
        lens = torch.full((B,), ctx, device=dev, dtype=torch.int32)
        q = torch.randn(B, H, R, device=dev, dtype=torch.bfloat16)
        rr = torch.arange(B, device=dev, dtype=torch.int32)
        qp = torch.full((B,), ctx - 1, device=dev, dtype=torch.int32)
        desc = {}
        auto = triton_mla.choose_splits(B, 2, ctx, 64, wave)
        for s in sorted({1, 2, 3, 4, 6, 8, auto}):
            us = _time(lambda i, s=s: triton_mla.mla_decode_triton(
                q, pools[i % len(pools)], bt, lens, rr, qp, scale=0.07, v_dim=V, num_splits=s,
                out_dtype=torch.bfloat16, max_local_len=ctx, descriptors=desc), len(pools))
            rows.append(dict(batch=B, partials="fp32", splits=s, auto=auto, us=us))
            print(f"B={B} splits={s} (auto {auto}) {us:.2f} us", flush=True)
    with open(out, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="JSON file for the rows")
    main(ap.parse_args().out)
