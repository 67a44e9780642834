"""`dcpctl bench kernel`: the local MLA decode kernel against the machine's measured roofline.

Per cell (kernel heads H, local context ctx, batch B; one query row per request, all keys visible):
bytes = KV (B*ctx*R*2) + q (B*H*R*2) + o (B*H*v*2, bf16), flops = 2*B*H*ctx*(R+v);
roofline fraction = max(bytes / copy_bw, flops / bf16_rate) / time, with bf16_rate the burst rate (bench/ceilings.py);
`fraction_sustained` divides by the sustained rate instead (the same product back to back, the clock the cells are
timed at: on an H200 ~670 against ~770 TFLOP/s), which only compute-bound cells feel.  Times are CUDA-graph replays
rotating over enough disjoint KV page sets that small cells are not served from L2.  Every available
backend (`triton`: ours, Gluon or Triton; `flashinfer`: bench/kernel_flashinfer.py; `flashmla`:
bench/kernel_flashmla.py) is timed per cell over the same pages, side by side; `--save-table` writes them as
the backend table the runtime chooses from.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import statistics
import sys
from pathlib import Path
from typing import Any, Iterator

import click

from dcpctl.plan.attention_names import MEASURED, PORTABLE
from dcpctl.plan.errors import UserError

R, V, PAGE = 576, 512, 64
SCALE = 1 / math.sqrt(192)
L2_ROTATE_BYTES = 512 << 20
FULL = {"heads": "16,64,128", "contexts": "8K,32K,64K,128K", "batches": "1,8,32,64"}
QUICK = {"heads": "16,128", "contexts": "8K,64K", "batches": "1,32"}
PEERS = tuple(n for n in MEASURED if n != PORTABLE)   # the field kernels beside ours (bench/kernel_<name>.py)
# (block_h, block_n, num_warps, num_stages, occupancy, tma[, lazy, ws]).  Not swept: 16 warps (64-head blocks
# slower, 128-head blocks do not compile), lazy rescaling (slower with 64-head blocks), the warp-specialized TMA
# loop (no measurable change).
CANDIDATES = [
    (16, 128, 8, 2, 1, False), (16, 128, 8, 2, 1, True), (16, 64, 8, 3, 1, True), (16, 128, 4, 2, 1, True),
    (32, 64, 8, 2, 1, True), (64, 32, 8, 2, 1, True), (64, 64, 8, 2, 1, True), (64, 64, 8, 2, 1, False),
    # the Gluon kernel (Hopper; block_n x num_stages = its ring of tiles)
    (64, 64, 8, 2, 1, False, False, False, True), (64, 32, 8, 4, 1, False, False, False, True)]


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Point file descriptor 1 (and sys.stdout) at stderr for the block: compilers write there directly."""
    _flush_all()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _flush_all()
        os.dup2(saved, 1)
        os.close(saved)


def _flush_all() -> None:
    """Python's stdout and C's stdio buffers (native code may have printf'ed into fd 1's buffer)."""
    sys.stdout.flush()
    try:
        import ctypes
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):   # no libc symbol lookup on this platform: Python's flush only
        pass


def _ints(text: str) -> list[int]:
    out = []
    for tok in text.split(","):
        tok = tok.strip().upper()
        out.append(int(tok[:-1]) * 1024 if tok.endswith("K") else int(tok))
    return out


class Pool:
    """One random bf16 latent pool big enough for the largest cell; block tables over disjoint pages."""

    def __init__(self, tokens: int, device: Any, fp8: bool = False) -> None:
        import torch
        self.pages = math.ceil(tokens / PAGE)
        self.kv = torch.randn(self.pages, PAGE, R, device=device, dtype=torch.bfloat16)
        self.kv_scale = 1.0 if fp8 else None     # N(0, 1) values sit well inside e4m3's range
        if fp8:
            self.kv = self.kv.to(torch.float8_e4m3fn)
        from dcpctl.bench.kernel_flashinfer import limit_pages
        # the first pages below FlashInfer's uint32 offset limit, so most cells' tables stay under it
        low = min(self.pages, limit_pages(PAGE, R))
        self.perm = torch.cat([torch.randperm(low, device=device),
                               low + torch.randperm(self.pages - low, device=device)]).int()

    def tables(self, batch: int, ctx: int) -> list[Any]:
        # -> k block tables [batch, ctx/PAGE], k = enough sets to exceed L2 (disjoint pages)
        per = batch * math.ceil(ctx / PAGE)
        k = max(1, min(self.pages // per, math.ceil(L2_ROTATE_BYTES / (per * PAGE * R * 2))))
        return [self.perm[i * per:(i + 1) * per].view(batch, -1) for i in range(k)]


def naive_decode(q: Any, kv_pool: Any, bt: Any, ctx: int) -> tuple[Any, Any]:
    # q: [B, H, R]  kv_pool: [pages, P, R]  bt: [B, ctx/P] -> o [B, H, V], lse [B, H]; gather + two bmm
    import torch
    kv = kv_pool[bt.long()].flatten(1, 2)[:, :ctx].to(q.dtype)   # fp8 pools: scale 1.0 in this bench
    s = torch.bmm(q, kv.transpose(1, 2)).float() * SCALE
    lse = torch.logsumexp(s, -1)
    o = torch.bmm(torch.exp(s - lse.unsqueeze(-1)).to(q.dtype), kv[..., :V])
    return o, lse


def _cfg(t: tuple[int, ...]) -> Any:
    from dcpctl.runtime.attention.triton_mla import KernelConfig
    return KernelConfig(*t)


def _decode_fn(q: Any, pool: Pool, bt: Any, ctx: int, cfg: Any) -> Any:
    # q: [B, H, R]  bt: [B, ctx/P] -> a callable decoding every row over all ctx keys
    import torch
    from dcpctl.runtime.attention.triton_mla import mla_decode_triton
    b = bt.shape[0]
    lens = torch.full((b,), ctx, dtype=torch.int32, device=q.device)
    rows = torch.arange(b, dtype=torch.int32, device=q.device)
    return lambda: mla_decode_triton(q, pool.kv, bt, lens, rows, lens - 1, scale=SCALE, v_dim=V,
                                     kv_scale=pool.kv_scale, out_dtype=torch.bfloat16, max_local_len=ctx, config=cfg)


def check_config(pool: Pool, heads: int, cfg: Any) -> float:
    """Relative error of the kernel with cfg against the naive fp32 path (B=3, ctx=3000)."""
    import torch
    q = torch.randn(3, heads, R, device=pool.kv.device, dtype=torch.bfloat16)
    bt = pool.tables(3, 3008)[0]
    o = _decode_fn(q, pool, bt, 3000, cfg)().o.float()
    want, _ = naive_decode(q.float(), pool.kv.float(), bt, 3000)
    return float((o - want).norm() / want.norm())


def time_cell(pool: Pool, heads: int, ctx: int, batch: int, cfg: Any, naive: bool,
              preheat_s: float = 0.0) -> dict[str, Any]:
    # q: [batch, heads, R] random; KV rotated over pool.tables(batch, ctx) -> one result row
    import torch
    from dcpctl.bench.ceilings import events_ms, graph_ms
    q = torch.randn(batch, heads, R, device=pool.kv.device, dtype=torch.bfloat16)
    fns = [_decode_fn(q, pool, bt, ctx, cfg) for bt in pool.tables(batch, ctx)]
    ms = graph_ms(fns * max(1, math.ceil(8 / len(fns))), preheat_s=preheat_s)
    kv_bytes = batch * ctx * R * pool.kv.element_size()
    row = {"heads": heads, "ctx": ctx, "batch": batch, "time_us": ms * 1e3,
           "bytes": kv_bytes + batch * heads * (R + V) * 2, "flops": 2 * batch * heads * ctx * (R + V),
           "config": list(cfg), "splits": _splits(heads, ctx, batch, cfg)}
    if naive:
        bt = pool.tables(batch, ctx)[0]
        try:
            row["naive_us"] = events_ms(lambda: naive_decode(q, pool.kv, bt, ctx), reps=5, warmup=1) * 1e3
        except torch.OutOfMemoryError:
            row["naive_us"] = None
        torch.cuda.empty_cache()
    return row


def _splits(heads: int, ctx: int, batch: int, cfg: Any) -> int:
    import torch
    from dcpctl.runtime.gpu import gpu_facts
    from dcpctl.runtime.attention.triton_mla import choose_splits
    sms = gpu_facts(torch.device("cuda", 0)).sms * cfg.occupancy       # as the kernel's wrapper sizes them
    return choose_splits(batch, -(-heads // cfg.block_h), ctx, cfg.block_n, sms)


def sweep(pool: Pool, heads: int, log: list[dict[str, Any]]) -> Any:
    """Fastest correct candidate config at (B=32, ctx=32K) for this head count."""
    from dcpctl.runtime.attention.kernel_choice import use_gluon
    best, best_us = None, math.inf
    for t in CANDIDATES:
        cfg = _cfg(t)
        if cfg.block_h > max(16, 1 << (heads - 1).bit_length()) and not cfg.gluon:   # Gluon masks unused heads
            continue
        if cfg.gluon and not use_gluon(cfg, pool.kv, V, pool.kv_scale):   # not Hopper / fp8: it would time Triton
            continue
        try:
            err = check_config(pool, heads, cfg)
            us = time_cell(pool, heads, 32768, 32, cfg, naive=False)["time_us"] if err < 2e-2 else math.inf
        except Exception as e:  # out of shared memory / registers: not a candidate here
            err, us = None, math.inf
            log.append({"heads": heads, "config": list(t), "error": str(e).splitlines()[0][:200]})
            continue
        log.append({"heads": heads, "config": list(t), "rel_err": err, "time_us": us})
        _progress(f"sweep {log[-1]}")
        if us < best_us:
            best, best_us = cfg, us
    if best is None:
        raise RuntimeError(f"no kernel config compiled and passed for heads={heads}")
    return best


def run(heads: list[int], contexts: list[int], batches: list[int], do_sweep: bool, naive: bool,
        fp8: bool = False, backends: str = "auto", preheat_s: float = 0.0) -> dict[str, Any]:
    import torch
    from dcpctl.bench.ceilings import Ceilings, measure, sustained_bf16_rate
    from dcpctl.runtime.attention.triton_mla import default_config
    dev = torch.device("cuda")
    ceil = measure(dev)
    sustained = sustained_bf16_rate(dev)
    ceil_sus = Ceilings(ceil.copy_bytes_per_s, sustained)    # the same copy ceiling, the sustained bf16 rate
    _progress(f"ceilings {ceil.calibration()}, sustained bf16 {sustained / 1e12:.1f} TFLOP/s")
    pool = Pool(max(batches) * max(contexts), dev, fp8)
    log: list[dict[str, Any]] = []
    cfgs = {h: sweep(pool, h, log) if do_sweep else default_config(h, dev) for h in heads}
    peers, notes = _peers(pool, backends)
    cells = []
    for h in heads:
        live = {n: p for n, p in peers.items() if _peer_checks(n, p, pool, h, cfgs[h], log)}
        rule = _auto_rule(h, "fp8_e4m3" if fp8 else "bf16", set(live))
        for ctx in contexts:
            for b in batches:
                row = time_cell(pool, h, ctx, b, cfgs[h], naive, preheat_s)
                roof = ceil.roofline_s(row["bytes"], row["flops"]) * 1e6
                compute = row["flops"] / ceil.bf16_flops_per_s > row["bytes"] / ceil.copy_bytes_per_s
                row.update(roofline_us=roof, fraction=roof / row["time_us"], bound="compute" if compute else "memory")
                row["backends"] = {PORTABLE: {"time_us": row["time_us"], "fraction": row["fraction"]}}
                for name, peer in list(live.items()):
                    try:
                        row["backends"][name] = peer.time(h, ctx, b, SCALE, roof, preheat_s)
                    except Exception as e:   # its column ends here, ours goes on (a CUDA error may be sticky)
                        row["backends"][name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
                        live.pop(name)
                roof_sus = ceil_sus.roofline_s(row["bytes"], row["flops"]) * 1e6
                row["roofline_sustained_us"] = roof_sus
                for v in row["backends"].values():
                    if v.get("time_us"):
                        v["fraction_sustained"] = roof_sus / v["time_us"]
                timed = {k: v["time_us"] for k, v in row["backends"].items() if v.get("time_us")}
                row["best"], row["auto"] = min(timed, key=timed.get), rule.pick(b, ctx)
                row["auto_over_best"] = timed[row["auto"]] / timed[row["best"]] - 1 if row["auto"] in timed else None
                cells.append(row)
                _progress(f"cell {row}")
    fr = sorted(c["fraction"] for c in cells)
    return {"device": torch.cuda.get_device_name(), "kv_dtype": "fp8_e4m3" if fp8 else "bf16",
            "torch": torch.__version__, "triton": _triton_version(), "python": platform.python_version(),
            "calibration": ceil.calibration(), "bf16_sustained_tflops": round(sustained / 1e12, 2),
            "preheat_s": preheat_s,
            "configs": {h: list(c) for h, c in cfgs.items()}, "sweep": log, "cells": cells,
            "fraction_min": fr[0], "fraction_median": statistics.median(fr),
            "page_size": PAGE, "backends": [PORTABLE, *peers], **notes,
            "exchange": "not timed by this command: dcpctl bench exchange (two or more GPUs)"}


def _auto_rule(heads: int, kv: str, timed: set[str]) -> Any:
    """The runtime's automatic choice for this head count (the shipped table), with the backends this call timed."""
    import torch
    from dcpctl.plan.attention_table import Key, decide, table_for
    from dcpctl.runtime.tuned import gpu
    name, sm = gpu(torch.device("cuda", torch.cuda.current_device()))
    key = Key(heads, kv, PAGE, name)
    avail = {b: None if b == PORTABLE or b in timed else "not timed" for b in MEASURED}
    return decide(key, "auto", avail, table_for(name, sm))


def _side(name: str, pool: Pool) -> Any:
    if name == "flashinfer":
        from dcpctl.bench.kernel_flashinfer import FlashInferSide
        return FlashInferSide(pool)
    from dcpctl.bench.kernel_flashmla import FlashMLASide
    return FlashMLASide(pool)


def _peers(pool: Pool, backends: str) -> tuple[dict[str, Any], dict[str, str]]:
    # -> (the field kernels' sides that run here, what the result says about each field kernel)
    names = list(PEERS) if backends == "auto" else [b.strip() for b in backends.split(",")]
    sides, notes = {}, {}
    for name in PEERS:
        if name not in names:
            notes[name] = "not asked for (--backends)"
            continue
        side = _side(name, pool)
        if not side.ok:
            if backends != "auto":
                raise UserError(f"--backends {name}: {side.why}")
            notes[name] = f"not timed: {side.why}"
            continue
        sides[name], notes[name] = side, side.why
    return sides, notes


def _peer_checks(name: str, peer: Any, pool: Pool, heads: int, cfg: Any, log: list[dict[str, Any]]) -> bool:
    """A field kernel against ours on one small cell (B=3, ctx=3000) before it is timed at this head count."""
    import torch
    q = torch.randn(3, heads, R, device=pool.kv.device, dtype=torch.bfloat16)
    bt = pool.tables(3, 3008)[0]
    try:
        err = peer.check(q, bt, 3000, SCALE, _decode_fn(q, pool, bt, 3000, cfg)())
    except Exception as e:   # a build or run failure costs its column, never ours
        log.append({"heads": heads, "backend": name, "error": str(e).splitlines()[0][:300]})
        return False
    log.append({"heads": heads, "backend": name, "rel_err_vs_ours": err})
    return err < 2e-2


def _progress(msg: str) -> None:
    from dcpctl import console
    console.info(msg)


def _triton_version() -> str:
    import triton
    return triton.__version__


def _auto(c: dict[str, Any]) -> str:
    over = c.get("auto_over_best")
    return c["auto"] + ("" if over is None else f" ({over:+.1%})")


def _us(b: dict[str, Any] | None) -> str:
    return "-" if not b or b.get("time_us") is None else f"{b['time_us']:.1f}"


def _frac(b: dict[str, Any] | None) -> str:
    return "-" if not b or b.get("fraction") is None else f"{b['fraction']:.2f}"


def _sustained(c: dict[str, Any]) -> str:
    f = c["backends"].get(c["best"], {}).get("fraction_sustained")
    return "-" if f is None else f"{f:.2f}"


def _table(res: dict[str, Any]) -> None:
    from dcpctl import console
    names = res["backends"]
    rows = [[c["heads"], c["ctx"], c["batch"], *[_us(c["backends"].get(n)) for n in names], f"{c['roofline_us']:.1f}",
             c["bound"], *[_frac(c["backends"].get(n)) for n in names], c["best"], _sustained(c), _auto(c),
             "-" if c.get("naive_us") is None else f"{c['naive_us']:.1f}"]
            for c in res["cells"]]
    cal = res["calibration"]
    title = (f"{res['device']}, KV {res['kv_dtype']}: copy {cal['copy_tbps']} TB/s, bf16 {cal['bf16_tflops']} TFLOP/s "
             f"(sustained {res['bf16_sustained_tflops']}); "
             f"ours' roofline fraction min {res['fraction_min']:.2f} median {res['fraction_median']:.2f}")
    console.out.print(console.table(title, ["heads", "ctx", "batch", *[f"{n} us" for n in names], "roofline us", "bound",
                                            *[f"{n} frac" for n in names], "fastest",
                                            "fastest frac (sustained bf16)", "auto (over fastest)",
                                            "naive torch us"], rows))
    console.out.print(f"FlashInfer: {res['flashinfer']}\nFlashMLA: {res.get('flashmla', '-')}\n"
                      f"Exchange: {res['exchange']}")


@click.command(name="kernel")
@click.option("--heads", default=FULL["heads"], show_default=True, help="Kernel heads (local_heads * dcp).")
@click.option("--contexts", default=FULL["contexts"], show_default=True, help="Local context lengths (K = 1024).")
@click.option("--batches", default=FULL["batches"], show_default=True, help="Batch sizes.")
@click.option("--quick", is_flag=True, help=f"Small grid: heads {QUICK['heads']}, contexts {QUICK['contexts']}, "
                                            f"batches {QUICK['batches']}.")
@click.option("--sweep/--no-sweep", default=False, show_default=True, help="Pick the tile config per head count.")
@click.option("--naive/--no-naive", default=True, show_default=True, help="Also time a naive torch decode.")
@click.option("--kv-dtype", type=click.Choice(["bf16", "fp8"]), default="bf16", show_default=True,
              help="Latent KV pool dtype (fp8 = e4m3 with a per-tensor scale).")
@click.option("--backends", default="auto", show_default=True,
              help="Backends to time side by side: auto (every one available here), or a list of triton, "
                   "flashinfer, flashmla.")
@click.option("--save-table", type=click.Path(dir_okay=False), default=None,
              help="Write every cell's per-backend times as a backend table (the runtime chooses from it with "
                   "--attention-table FILE).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--preheat", type=click.FloatRange(0, 10), default=0.0, show_default=True,
              help="Seconds each backend replays a cell before timing it, so every cell is timed at the steady clock "
                   "its sustained run settles to (the sustained bf16 ceiling's regime; H200: power cap). Adds about "
                   "cells x backends x S seconds; the --sweep candidates are timed without it.")
@click.option("--save-calibration", type=click.Path(dir_okay=False), default=None,
              help="Fit copy_tbps, bf16_tflops, attn_efficiency per head count and attn_fixed_us into this "
                   "calibration file (other keys kept) for `plan/recommend --calibration`.")
def command(heads: str, contexts: str, batches: str, quick: bool, sweep: bool, naive: bool, kv_dtype: str,
            backends: str, save_table: str | None, fmt: str, preheat: float, save_calibration: str | None) -> None:
    """Time the local MLA decode backends against this GPU's measured copy bandwidth and bf16 matmul rate.

    Reports per (kernel heads, local context, batch): each available backend's time (ours, `triton`:
    the Gluon or Triton kernel; `flashinfer` where it imports; `flashmla` where it builds, sm_90) over the same
    pages, the roofline time,
    bound, each one's fraction of roofline and the fastest, plus a naive torch decode for comparison.
    `--save-table FILE` writes the backend table the runtime's automatic choice reads.  Needs a CUDA GPU.
    """
    bad = {b.strip() for b in backends.split(",")} - {"auto", *MEASURED}
    if bad:
        raise UserError(f"--backends {backends}: unknown {sorted(bad)}; valid: auto, {', '.join(MEASURED)}")
    import torch
    if not torch.cuda.is_available():
        raise UserError("dcpctl bench kernel needs a CUDA GPU (torch.cuda.is_available() is False).")
    from dcpctl.bench.decode import check_writable
    for path, flag in ((save_calibration, "--save-calibration"), (save_table, "--save-table")):
        if path:
            check_writable(Path(path), flag)
    g = QUICK if quick else {"heads": heads, "contexts": contexts, "batches": batches}
    with stdout_to_stderr():   # Triton prints a failed candidate's PTX on stdout; keep --format json clean
        res = run(_ints(g["heads"]), _ints(g["contexts"]), _ints(g["batches"]), sweep, naive, kv_dtype == "fp8",
                  backends, preheat)
    if fmt == "json":
        click.echo(json.dumps(res, indent=1))
    else:
        _table(res)
    if save_table:
        from dcpctl.bench.kernel_table import table_from_bench, write
        major, minor = torch.cuda.get_device_capability()
        res["sm"] = major * 10 + minor
        write(table_from_bench(res, "dcpctl " + " ".join(sys.argv[1:])), Path(save_table))
    if save_calibration:   # after the results are out: a grid that does not determine the fit loses nothing
        from dcpctl.plan.calibrate import fit_kernel, merge_calibration
        merge_calibration(Path(save_calibration), fit_kernel(res), {"kernel": "dcpctl bench kernel"})
