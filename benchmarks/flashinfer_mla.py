"""FlashInfer's MLA paged decode timed next to ours on the same pages, in one GPU run.

    python3 -m benchmarks.flashinfer_mla --out DIR [--quick] [--work /tmp/dcpctl-flashinfer]

FlashInfer comes from the sdist that `tools/gpu_env.sh prepare` puts in .vendor/ (no network on
the device, no pip install), made importable by dcpctl/runtime/attention/flashinfer_setup.py (the
runtime's own route to it: unpacked under --work, its data folders linked, the tree first on sys.path).

Ours is timed exactly as `dcpctl bench kernel` does (dcpctl/bench/kernel.py `time_cell`: CUDA-graph
replay over block tables rotated across >= 512 MiB of disjoint pages), over the whole grid first and
saved, so that a FlashInfer crash cannot cost our numbers.  FlashInfer then gets one planned
`BatchMLAPagedAttentionWrapper` per block table of the same rotation (plan() before capture), after a
check per head count against ours and the naive fp32 decode (its lse is base 2: converted).
Every FlashInfer failure (import, JIT, check, plan/run, capture) becomes one line in the output,
full text in DIR/flashinfer_errors.log.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from dcpctl.runtime.attention.flashinfer_setup import activate, prepare_source

ROOT = Path(__file__).resolve().parents[1]

VENDOR = ROOT / ".vendor"
TARBALL = VENDOR / "flashinfer_python-0.2.14.tar.gz"
PACKAGING_WHEEL = VENDOR / "packaging-25.0-py3-none-any.whl"   # fallback: flashinfer.jit imports `packaging`
# mla_hopper.cuh / mla.cuh compute `page_index * stride_page` in uint32: a KV tensor over 2^32 elements wraps
MAX_KV_ELEMENTS = 1 << 32
TOL = 2e-2
GRAPH = "graph: CUDA-graph replay for both (as dcpctl bench kernel)"
EAGER = "eager: CUDA events over the same eager loop for both (FlashInfer's run() did not capture)"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Peer:
    """FlashInfer in this run: the module, what was chosen and why, and every failure as one line."""

    def __init__(self, out: Path) -> None:
        self.fi: Any = None
        self.built: dict[str, bool] = {}     # backend -> its JIT module built and loaded
        self.info: dict[str, Any] = {"version": None, "backend": {}, "jit_s": {}, "checks": {}, "notes": []}
        self.errlog = out / "flashinfer_errors.log"

    def fail(self, stage: str, e: BaseException) -> str:
        text = "".join(traceback.format_exception(e))
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()] or [type(e).__name__]
        first = next((ln for ln in lines if "error" in ln.lower()), lines[0])
        line = f"{stage}: {type(e).__name__}: {first[:300]}"
        with self.errlog.open("a") as f:
            f.write(f"==== {line}\n{text}\n")
        return self.note(line)

    def note(self, line: str) -> str:
        self.info["notes"].append(line)
        log(f"flashinfer {line}")
        return line


def load(peer: Peer, tarball: Path, work: Path) -> None:
    try:
        log(f"unpacking {tarball} under {work}")
        src = prepare_source(tarball, work)
        activate(src, work, PACKAGING_WHEEL)
        import flashinfer
        from torch.utils.cpp_extension import CUDA_HOME
        peer.fi, peer.info["version"], peer.info["cuda_home"] = flashinfer, flashinfer.__version__, CUDA_HOME
        log(f"flashinfer {flashinfer.__version__} from {src}; CUDA_HOME={CUDA_HOME}, "
            f"TORCH_CUDA_ARCH_LIST={os.environ['TORCH_CUDA_ARCH_LIST']}, MAX_JOBS={os.environ['MAX_JOBS']}")
    except Exception as e:
        peer.fail("import", e)


def jit(peer: Peer, backend: str) -> bool:
    # the module plan() would build on first use, built here (once) so JIT time and failures are separate
    if backend in peer.built:
        return peer.built[backend]
    peer.built[backend] = False
    import torch
    from dcpctl.bench.kernel import R, V
    log(f"JIT {backend} MLA module: start (nvcc, minutes)")
    t0 = time.time()
    try:
        peer.fi.mla.get_batch_mla_module(backend, torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.int32,
                                         V, R - V, False)
    except Exception as e:
        peer.fail(f"jit {backend}", e)
        return False
    peer.built[backend], peer.info["jit_s"][backend] = True, round(time.time() - t0, 1)
    log(f"JIT {backend} MLA module: done in {time.time() - t0:.0f}s")
    return True


def peer_cache(pool: Any, layout: str) -> tuple[Any, Any, str]:
    # pool.kv: [pages, P, R] -> ckv [pages, P, V], kpe [pages, P, R-V] (strided views or copies), description
    from dcpctl.bench.kernel import V
    if layout == "auto":
        layout = "views" if pool.kv.numel() <= MAX_KV_ELEMENTS else "separate"
    if layout == "views":
        return pool.kv[..., :V], pool.kv[...,
                                         V:], "strided views of our fused [pages, 64, 576] pool (zero copy)"
    over = pool.kv.numel() > MAX_KV_ELEMENTS
    why = (" (the fused pool is over 2^32 elements: FlashInfer's uint32 page offset would wrap)"
           if over else "")
    ckv, kpe = pool.kv[..., :V].contiguous(), pool.kv[..., V:].contiguous()
    if ckv.numel() > MAX_KV_ELEMENTS:
        raise ValueError(f"ckv has {ckv.numel()} elements > 2^32: FlashInfer 0.2.14 page offsets would wrap")
    return ckv, kpe, "separate contiguous ckv/kpe copies of the same pages" + why


def fi_decode_fn(peer: Peer, backend: str, ws: Any, q: Any, cache: tuple[Any, Any], bt: Any,
                 ctx: int) -> Callable:
    # q: [B, H, R]  cache: ckv [pages, P, V], kpe [pages, P, R-V]  bt: [B, ctx/P]
    # -> planned callable () -> (o [B, H, V], lse [B, H] base 2)
    import torch
    from dcpctl.bench.kernel import PAGE, SCALE, V, R
    b, h = q.shape[:2]
    i32 = dict(dtype=torch.int32, device=q.device)
    w = peer.fi.mla.BatchMLAPagedAttentionWrapper(ws, backend=backend)
    w.plan(qo_indptr=torch.arange(b + 1, **i32), kv_indptr=torch.arange(b + 1, **i32) * bt.shape[1],
           kv_indices=bt.reshape(-1).contiguous(), kv_len_arr=torch.full((b,), ctx, **i32), num_heads=h,
           head_dim_ckv=V, head_dim_kpe=R - V, page_size=PAGE, causal=False, sm_scale=SCALE,
           q_data_type=q.dtype, kv_data_type=cache[0].dtype)
    q_nope, q_pe = q[..., :V], q[..., V:]
    return lambda: w.run(q_nope, q_pe, cache[0], cache[1], return_lse=True)


def rel(a: Any, b: Any) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max())


def check(peer: Peer, backend: str, ws: Any, pool: Any, cache: tuple[Any, Any], heads: int) -> dict[str,
                                                                                                    float]:
    # B=3, ctx=3000 (as kernel.check_config): FlashInfer against ours; both against the naive fp32 decode
    import torch
    from dcpctl.bench.kernel import R, _decode_fn, naive_decode
    from dcpctl.runtime.attention.triton_mla import default_config
    q = torch.randn(3, heads, R, device=pool.kv.device, dtype=torch.bfloat16)
    bt = pool.tables(3, 3008)[0]
    ours = _decode_fn(q, pool, bt, 3000, default_config(heads))()
    o, lse2 = fi_decode_fn(peer, backend, ws, q, cache, bt, 3000)()
    lse = lse2 * math.log(2)   # mla_hopper.cuh / mla.cuh write lse = log2(d) + m in base-2 units
    pages = pool.kv[bt.reshape(-1).long()].float()      # only this cell's pages in fp32, renumbered 0..n-1
    want_o, want_lse = naive_decode(q.float(), pages, torch.arange(bt.numel(), device=bt.device).view_as(bt),
                                    3000)
    return {"o_vs_ours": rel(o, ours.o), "lse_vs_ours": rel(lse, ours.lse),
            "ours_o_vs_naive": rel(ours.o, want_o), "flashinfer_o_vs_naive": rel(o, want_o),
            "flashinfer_lse_vs_naive": rel(lse, want_lse)}


def pick_backend(peer: Peer, backends: list[str], ws: Any, pool: Any, cache: tuple[Any, Any],
                 heads: int) -> str | None:
    """The first backend that JIT-compiles and agrees with ours within TOL at this head count."""
    for be in filter(lambda be: jit(peer, be), backends):
        try:
            c = check(peer, be, ws, pool, cache, heads)
        except Exception as e:
            peer.fail(f"check {be} heads={heads}", e)
            continue
        peer.info["checks"][f"{be}/{heads}"] = c
        log(f"check {be} heads={heads}: {c}")
        if max(c["o_vs_ours"], c["lse_vs_ours"]) <= TOL:
            return be
        peer.note(f"check {be} heads={heads}: disagrees with ours beyond {TOL} (o {c['o_vs_ours']:.3g}, "
                  f"lse {c['lse_vs_ours']:.3g}); not timed with this backend")
    return None


def eager_ms(fns: list[Callable[[], object]]) -> float:
    """Median ms per call of fns called in turn, eagerly, between two CUDA events."""
    from dcpctl.bench.ceilings import events_ms
    return events_ms(lambda: [f() for f in fns], reps=10, warmup=2) / len(fns)


def time_peer(peer: Peer, ws: Any, pool: Any, cache: tuple[Any, Any], row: dict[str, Any], cfg: Any) -> None:
    # FlashInfer over the same rotation of block tables as row's `time_cell`; fills flashinfer_us (+ eager
    # pair)
    import torch
    from dcpctl.bench.ceilings import graph_ms
    from dcpctl.bench.kernel import R, _decode_fn
    h, ctx, b = row["heads"], row["ctx"], row["batch"]
    q = torch.randn(b, h, R, device=pool.kv.device, dtype=torch.bfloat16)
    tables = pool.tables(b, ctx)
    reps = max(1, math.ceil(8 / len(tables)))
    fns = [fi_decode_fn(peer, peer.info["backend"][h], ws, q, cache, bt, ctx) for bt in tables] * reps
    for f in fns[:len(tables)]:   # one eager pass first: a failure here is run()'s, not the capture's
        f()
    torch.cuda.synchronize()
    if peer.info["timing"] == GRAPH:
        try:
            row["flashinfer_us"] = graph_ms(fns) * 1e3
            return
        except Exception as e:
            peer.fail("graph capture of run()", e)
            peer.info["timing"] = EAGER
    row["flashinfer_us"] = eager_ms(fns) * 1e3
    row["ours_eager_us"] = eager_ms([_decode_fn(q, pool, bt, ctx, cfg) for bt in tables] * reps) * 1e3


def ours_phase(pool: Any, ceil: Any, grid: tuple[list[int], ...],
               cfgs: dict[int, Any]) -> list[dict[str, Any]]:
    """Our kernel over the whole grid first, so a FlashInfer crash cannot cost our numbers."""
    from dcpctl.bench.kernel import time_cell
    cells = []
    for h in grid[0]:
        for ctx in grid[1]:
            for b in grid[2]:
                row = time_cell(pool, h, ctx, b, cfgs[h], naive=False)
                row["ours_us"] = row.pop("time_us")
                row["roofline_us"] = ceil.roofline_s(row["bytes"], row["flops"]) * 1e6
                row["ours_fraction"] = row["roofline_us"] / row["ours_us"]
                cells.append(row)
                log(f"ours H={h} ctx={ctx} B={b}: {row['ours_us']:.1f} us, "
                    f"roofline fraction {row['ours_fraction']:.2f}")
    return cells


def peer_phase(peer: Peer, args: argparse.Namespace, pool: Any, res: dict[str, Any], out: Path) -> None:
    import torch
    load(peer, args.tarball, args.work)
    if peer.fi is None:
        return
    try:
        ckv, kpe, peer.info["layout"] = peer_cache(pool, args.layout)
    except Exception as e:
        peer.fail("layout", e)
        return
    ws = torch.empty(128 << 20, dtype=torch.int8, device=pool.kv.device)   # the size FlashInfer recommends
    for h in sorted({c["heads"] for c in res["cells"]}):
        be = pick_backend(peer, args.backends.split(","), ws, pool, (ckv, kpe), h)
        if be is not None:
            peer.info["backend"][h] = be
    for row in res["cells"]:
        if row["heads"] not in peer.info["backend"]:
            continue
        try:
            time_peer(peer, ws, pool, (ckv, kpe), row, res["configs"][row["heads"]])
        except Exception as e:   # a CUDA error is sticky: later cells would only repeat it
            row["flashinfer_error"] = peer.fail(f"run heads={row['heads']} ctx={row['ctx']} "
                                                f"batch={row['batch']}", e)
            peer.note("run: the remaining cells were not timed")
            return
        ours = row.get("ours_eager_us", row["ours_us"])
        row.update(ours_over_flashinfer=ours / row["flashinfer_us"],
                   flashinfer_fraction=row["roofline_us"] / row["flashinfer_us"])
        log(f"flashinfer H={row['heads']} ctx={row['ctx']} B={row['batch']}: {row['flashinfer_us']:.1f} us, "
            f"ours/flashinfer {row['ours_over_flashinfer']:.2f}")
        save(out, res)


def save(out: Path, res: dict[str, Any]) -> None:
    (out / "flashinfer_mla.json").write_text(json.dumps(res, indent=1, default=str))


def markdown(res: dict[str, Any]) -> str:
    fi = res["flashinfer"]
    def f(x: float | None, d: int = 1) -> str:
        return "-" if x is None else f"{x:.{d}f}"
    lines = [f"{res['device']}: copy {res['calibration']['copy_tbps']} TB/s, bf16 "
             f"{res['calibration']['bf16_tflops']} TFLOP/s; FlashInfer {fi['version']} backend "
             f"{fi['backend'] or '-'}, KV {fi.get('layout', '-')}, timing {fi['timing']}", "",
             "| heads | ctx | batch | ours us | FlashInfer us | ours/FlashInfer | ours roofline frac "
             "| FlashInfer roofline frac |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in res["cells"]:
        lines.append(f"| {c['heads']} | {c['ctx']} | {c['batch']} | "
                     f"{f(c.get('ours_eager_us', c['ours_us']))} | {f(c.get('flashinfer_us'))} | "
                     f"{f(c.get('ours_over_flashinfer'), 2)} | {f(c['ours_fraction'], 2)} | "
                     f"{f(c.get('flashinfer_fraction'), 2)} |")
    return "\n".join(lines + [""] + [f"FlashInfer: {n}" for n in fi["notes"]])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True,
                    help="folder for flashinfer_mla.json and the error log")
    ap.add_argument("--quick", action="store_true", help="heads 16,128 x ctx 8K,64K x batch 1,32")
    ap.add_argument("--tarball", type=Path, default=TARBALL)
    ap.add_argument("--work", type=Path, default=Path("/tmp/dcpctl-flashinfer"), help="unpack + JIT cache")
    ap.add_argument("--backends", default="fa3,fa2", help="tried in order per head count")
    ap.add_argument("--layout", choices=["auto", "views", "separate"], default="auto",
                    help="FlashInfer's ckv/kpe: views of our fused pool or copies (auto: views under 2^32 "
                         "elements)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import torch
    from dcpctl.bench.ceilings import measure
    from dcpctl.bench.kernel import FULL, QUICK, Pool, _ints, _triton_version
    from dcpctl.runtime.attention.triton_mla import default_config
    g = QUICK if args.quick else FULL
    grid = tuple(_ints(g[k]) for k in ("heads", "contexts", "batches"))
    dev = torch.device("cuda")
    ceil = measure(dev)
    log(f"ceilings {ceil.calibration()}")
    pool = Pool(max(grid[2]) * max(grid[1]), dev)
    cfgs = {h: default_config(h) for h in grid[0]}
    peer = Peer(args.out)
    peer.info.update(timing=GRAPH, tarball=str(args.tarball))
    res: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                           "triton": _triton_version(), "python": platform.python_version(),
                           "calibration": ceil.calibration(), "configs": cfgs, "flashinfer": peer.info}
    res["cells"] = ours_phase(pool, ceil, grid, cfgs)
    save(args.out, res)
    try:
        peer_phase(peer, args, pool, res, args.out)
    except Exception as e:
        peer.fail("unexpected", e)
    save(args.out, res)
    print(markdown(res), flush=True)


if __name__ == "__main__":
    main()
