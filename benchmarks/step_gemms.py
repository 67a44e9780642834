"""The decode step's GEMMs one by one on one GPU, against their weight-bytes roofline.

Every linear layer and the two absorbed-MLA bmms of a DeepSeek-V3 layer (bf16, TP 1) at each batch:
microseconds per call (calls captured in a CUDA graph, as the step runs them), the weight bandwidth it reaches
and the time at the measured copy bandwidth, in the forms the step uses and in candidate forms (cuBLAS or
cuBLASLt; the bmms as einsum, strided `out=`, or transposed), so what the graph step spends in GEMMs beyond
the roofline is visible per GEMM.  Weights rotate over copies larger than L2, so no call reads a weight from
cache.

usage: python3 -m benchmarks.step_gemms [--batches 1,8,32] [-o out.json]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

D, H, NOPE, ROPE, L, V, Q, INTER = 7168, 128, 128, 64, 512, 128, 1536, 2048
LINEARS = {"qkv_a": (Q + L + ROPE, D), "q_a": (Q, D), "kv_a": (L + ROPE, D), "q_b": (H * (NOPE + ROPE), Q),
           "o_proj": (D, H * V), "gate_up": (2 * INTER, D), "down": (D, INTER)}
ROTATE_BYTES = 256 << 20   # > the H200's 50 MB L2


def _time(fn: Callable[[int], object], n: int, reps: int = 30) -> float:
    # fn(i) runs call i (on weight copy i % n) -> microseconds per call, timed as `reps` calls captured in one
    # CUDA graph (as the step runs them: eager launches from this host cost more than the small GEMMs
    # themselves)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(3):
            fn(i)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(reps):
            fn(i)
    graph.replay()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    s.record()
    graph.replay()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / reps * 1e3


def _copies(shape: tuple[int, ...]) -> list[torch.Tensor]:
    n = max(2, -(-ROTATE_BYTES // (torch.Size(shape).numel() * 2)))
    return [torch.randn(shape, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(n)]


def linears(b: int, libs: list[str]) -> list[dict]:
    rows, found = [], torch.backends.cuda.preferred_blas_library()
    x = torch.randn(b, max(k for _, k in LINEARS.values()), device="cuda", dtype=torch.bfloat16)
    for name, (n, k) in LINEARS.items():
        ws, xk = _copies((n, k)), x[:, :k].contiguous()
        for lib in libs:
            torch.backends.cuda.preferred_blas_library(lib)
            us = _time(lambda i: F.linear(xk, ws[i % len(ws)]), len(ws))
            rows.append({"gemm": name, "form": f"F.linear {lib}", "batch": b, "us": us, "bytes": n * k * 2})
    torch.backends.cuda.preferred_blas_library(found)   # the bmms below run under the library this process
                                                        # had
    return rows


def bmms(b: int) -> list[dict]:
    rows = []
    kc, vc = _copies((H, NOPE, L)), _copies((H, L, V))
    # a strided view, as in the step
    q = torch.randn(b, H, NOPE + ROPE, device="cuda", dtype=torch.bfloat16)[:, :, :NOPE]
    o = torch.randn(b, H, L, device="cuda", dtype=torch.bfloat16)
    qbuf = torch.empty(b, H, L + ROPE, device="cuda", dtype=torch.bfloat16)
    vbuf = torch.empty(b, H, V, device="cuda", dtype=torch.bfloat16)
    forms = {
        ("w_kc", "einsum"): lambda i: torch.einsum("thn,hnl->thl", q, kc[i % len(kc)]),
        ("w_kc", "bmm out= strided"): lambda i: torch.bmm(q.transpose(0, 1), kc[i % len(kc)],
                                                           out=qbuf[:, :, :L].transpose(0, 1)),
        ("w_kc", "bmm transposed"): lambda i: torch.bmm(kc[i % len(kc)].transpose(1, 2), q.permute(1, 2, 0)),
        ("w_vc", "einsum"): lambda i: torch.einsum("thl,hlv->thv", o, vc[i % len(vc)]),
        ("w_vc", "bmm out= strided"): lambda i: torch.bmm(o.transpose(0, 1), vc[i % len(vc)],
                                                          out=vbuf.transpose(0, 1)),
        ("w_vc", "bmm transposed"): lambda i: torch.bmm(vc[i % len(vc)].transpose(1, 2), o.permute(1, 2, 0)),
    }
    for (name, form), fn in forms.items():
        n = len(kc) if name == "w_kc" else len(vc)
        rows.append({"gemm": name, "form": form, "batch": b, "us": _time(fn, n), "bytes": H * L * NOPE * 2})
    return rows


def copy_bandwidth() -> float:
    a = torch.empty(1 << 30, device="cuda", dtype=torch.uint8)
    c = torch.empty_like(a)
    us = _time(lambda i: c.copy_(a), 1, reps=5)
    return 2 * a.numel() / (us * 1e-6)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--libs", default="cublas,cublaslt")
    ap.add_argument("-o", "--out")
    a = ap.parse_args()
    bw = copy_bandwidth()
    rows = []
    for b in (int(x) for x in a.batches.split(",")):
        rows += linears(b, a.libs.split(",")) + bmms(b)
    for r in rows:
        r["tbps"] = r["bytes"] / (r["us"] * 1e-6) / 1e12
        r["roofline_us"] = r["bytes"] / bw * 1e6
        r["vs_roofline"] = r["us"] / r["roofline_us"]
        print(f"B={r['batch']:<3} {r['gemm']:>8} {r['form']:<20} {r['us']:8.1f} us  {r['tbps']:5.2f} TB/s  "
              f"x{r['vs_roofline']:.2f} of the copy roofline", flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps({"copy_tbps": bw / 1e12, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
