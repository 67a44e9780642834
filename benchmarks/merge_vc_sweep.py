"""The `merge_vc` fusion's kernel against what it replaces, for decode's value product at DCP 1 (issue 17).

V3 shapes (128 heads, kv_lora 512, v_head_dim 128) at batch M with S split partials, S = triton_mla.choose_splits
for ctx --context on this GPU (the attention kernel's own choice): the merge kernel (fused_merge.merge_partials into
bf16 o) then head_bmm (o @ w_vc), against head_bmm_triton.merge_head_bmm at each of a grid of settings. Timed as
30 calls captured in one CUDA graph over w_vc copies larger than L2 (step_gemms._time); the partials are one copy,
as the attention kernel leaves them in L2 just before. Prints both per M; JSON to -o.

usage: PYTHONPATH=. python3 benchmarks/merge_vc_sweep.py [--batches 1,8,32] [--context 1032] [-o out.json]
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from step_gemms import _time  # noqa: E402

from dcpctl.runtime.attention.fused_merge import merge_partials  # noqa: E402
from dcpctl.runtime.attention.kernel_choice import gpu_facts  # noqa: E402
from dcpctl.runtime.attention.triton_mla import choose_splits, default_config as mla_config  # noqa: E402
from dcpctl.runtime.models.head_bmm_triton import MERGE_CONFIG, head_bmm, merge_head_bmm  # noqa: E402

H, L, V = 128, 512, 128
ROTATE = 8   # 8 x 16.8 MB of w_vc > the H200's 50 MB L2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--context", type=int, default=1032)
    ap.add_argument("-o", "--out")
    a = ap.parse_args()
    dev, dt = "cuda", torch.bfloat16
    cfg = mla_config(H)
    grid = list(itertools.product((64, 128), (32, 64, 128), (4, 8), (2, 3, 4)))
    ws = [torch.randn(H, L, V, device=dev, dtype=dt) * 0.05 for _ in range(ROTATE)]
    rows = []
    for m in (int(b) for b in a.batches.split(",")):
        s = choose_splits(m, -(-H // cfg.block_h), a.context, cfg.block_n, gpu_facts(torch.device(dev)).sms * cfg.occupancy)
        parts = torch.randn(s, m, H, L, device=dev)
        lse = torch.randn(s, m, H, device=dev) * 2
        out = torch.empty(m, H, V, device=dev, dtype=dt).transpose(0, 1)

        def unfused(i):
            o, _ = merge_partials(parts.view(s, m * H, L), lse.view(s, m * H), out_dtype=dt)
            head_bmm(o.view(m, H, L).transpose(0, 1), ws[i % ROTATE], out)

        unfused(0)
        ref = out.float().clone()
        base_us = _time(unfused, ROTATE)
        timed = []
        for c in grid:
            try:
                merge_head_bmm(parts, lse, ws[0], out, c)
                err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
                us = _time(lambda i, c=c: merge_head_bmm(parts, lse, ws[i % ROTATE], out, c), ROTATE)
            except Exception as e:  # a setting the compiler refuses: skip it, say so
                print(f"M={m} {c}: {type(e).__name__}", flush=True)
                continue
            if err > 1e-2:
                print(f"M={m} {c}: wrong result ({err:.1e} relative)", flush=True)
                continue
            timed.append({"config": c, "us": us, "err": err})
        timed.sort(key=lambda t: t["us"])
        d_us = next((t["us"] for t in timed if tuple(t["config"]) == MERGE_CONFIG), float("nan"))
        print(f"M={m:3} splits {s}: merge kernel + head_bmm {base_us:.2f} us; merge_head_bmm default {MERGE_CONFIG} "
              f"{d_us:.2f} us, best {timed[0]['config']} {timed[0]['us']:.2f} us; next: "
              + ", ".join(f"{t['config']} {t['us']:.2f}" for t in timed[1:6]), flush=True)
        rows.append({"M": m, "splits": s, "unfused_us": base_us, "default": MERGE_CONFIG, "default_us": d_us,
                     "timed": timed})
    if a.out:
        Path(a.out).write_text(json.dumps({"device": torch.cuda.get_device_name(), "context": a.context,
                                           "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
