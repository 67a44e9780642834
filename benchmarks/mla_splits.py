"""The local MLA decode alone (the Gluon kernel and its split merge) at 128 heads, ctx 1032, page 64: us per call
by split count at batch 8 and 32, each timed as 20 calls in one CUDA graph over pools that together exceed L2.

usage: PYTHONPATH=. python3 benchmarks/mla_splits.py OUT.json      (a CUDA GPU with Triton's Gluon, sm_90)
The twelfth session's data (h200_mla_splits_partials_s12.json) also has `partials: result` rows: bf16 split
partials, timed by this script's first version on the tree of 43b2c16, where $DCPCTL_SPLIT_PARTIALS chose them
(since reverted: slower).  On later trees there is only fp32, so this version times that alone.
"""
import argparse
import json


def main(out: str) -> None:
    import torch

    from dcpctl.runtime.attention import triton_mla
    dev = torch.device("cuda")
    rows = []
    for B in (8, 32):
        ctx, page, H, R, V = 1032, 64, 128, 576, 512
        pages = -(-ctx // page)
        n_pools = max(4, -(-120 * 2 ** 20 // ((B * pages + 1) * page * R * 2)))    # together > 120 MB (L2: 50 MB)
        pools = [torch.randn(B * pages + 1, page, R, device=dev, dtype=torch.bfloat16) for _ in range(n_pools)]
        bt = torch.arange(B * pages, device=dev, dtype=torch.int32).view(B, pages)
        lens = torch.full((B,), ctx, device=dev, dtype=torch.int32)
        q = torch.randn(B, H, R, device=dev, dtype=torch.bfloat16)
        rr = torch.arange(B, device=dev, dtype=torch.int32)
        qp = torch.full((B,), ctx - 1, device=dev, dtype=torch.int32)
        desc = {}
        auto = triton_mla.choose_splits(B, 2, ctx, 64, 132)
        for mode in ("fp32",):
            for s in sorted({1, 2, 3, 4, 6, 8, auto}):
                f = lambda pool: triton_mla.mla_decode_triton(q, pool, bt, lens, rr, qp, scale=0.07, v_dim=V, num_splits=s,
                                                         out_dtype=torch.bfloat16, max_local_len=ctx, descriptors=desc)
                for i in range(n_pools): f(pools[i])
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    for i in range(20): f(pools[i % n_pools])
                for _ in range(3): g.replay()
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(10): g.replay()
                e1.record(); torch.cuda.synchronize()
                us = e0.elapsed_time(e1) * 1000 / 200
                rows.append(dict(batch=B, partials=mode, splits=s, auto=auto, us=us))
                print(f"B={B} partials={mode:6} splits={s} (auto {auto}) {us:.2f} us", flush=True)
    json.dump(rows, open(out, "w"), indent=1)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="JSON file for the rows")
    main(ap.parse_args().out)
