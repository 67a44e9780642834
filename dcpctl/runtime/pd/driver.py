"""PD disaggregation in one torch.distributed world: a prefill instance and a decode instance.

    run_pd(cfg: PDLaunchConfig, requests, make_model=None) -> {"outputs": [...], "stats": {...}}

Every rank of the world calls it with the launch config of docs/pd.md.  Phases:

1. prefill: the prefill instance runs each prompt with max_new_tokens = 1 under its own DCP layout;
   at finish (before its pages are freed) each prefill rank stashes the rows it owns of positions
   < L, and keeps the sampled first token, its logprob and the request's generator state;
2. metadata: the first prefill rank broadcasts first tokens (and generator states) to the world;
3. rows: the transfer plan (pd/plan.py) moves exactly the rows each decode rank owns, one
   point-to-point send per (prefill rank, decode rank) pair, no collective of either DCP group;
4. decode: the decode instance writes them at its own physical slots (v // c of its own pages),
   starts each request after its first token (the prefill's sample, not recomputed) and decodes.

Both instances build every process group in the same order (prefill's, then decode's), as
torch.distributed requires.  Attention DP must be 1 on both sides.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import torch
import torch.distributed as dist

from dcpctl.contract.launch_config import LaunchConfig, PDLaunchConfig
from dcpctl.runtime.boot import load_target
from dcpctl.runtime.engine.engine import Engine
from dcpctl.runtime.engine.request import SamplingParams, Sequence
from dcpctl.runtime.parallel import GROUP_KINDS, ParallelState
from dcpctl.runtime.pd.plan import PDError, Transfer, dcp_infos, plan_transfers, transfer_path


def _states(pd: PDLaunchConfig, mode: str) -> ParallelState:
    # every rank creates every group in one order; only its own instance's become a ParallelState
    ps = None
    for m in ("prefill", "decode"):
        groups = getattr(pd.disaggregation, m).groups.lists()
        if m == mode:
            ps = ParallelState.build(groups, 1)
        else:
            for kind in GROUP_KINDS:
                for ranks in groups[kind]:
                    if len(ranks) > 1:
                        dist.new_group(ranks)
    return ps


def run_pd(cfg: PDLaunchConfig, requests: list[dict],
           make_model: Callable[[ParallelState, LaunchConfig], Any] | None = None) -> dict:
    """Prefill on the prefill ranks, move rows, decode on the decode ranks; the result on every rank."""
    d = cfg.disaggregation
    pre, dec = cfg.instance("prefill"), cfg.instance("decode")
    path = transfer_path(pre.topology.dcp_size, dec.topology.dcp_size)
    if d.transfer != path:
        raise PDError(f"launch config transfer ({d.transfer}) != {path} for these DCP sizes")
    if pre.kv.page_size != dec.kv.page_size:
        raise PDError(f"prefill page_size ({pre.kv.page_size}) != decode page_size ({dec.kv.page_size})")
    mode = "prefill" if dist.get_rank() in d.prefill.ranks else "decode"
    ps = _states(cfg, mode)
    mine = pre if mode == "prefill" else dec
    engine = Engine(make_model(ps, mine) if make_model else load_target(mine, ps), ps, mine)
    params = [SamplingParams.from_dict(r) for r in requests]
    plan = plan_transfers(dcp_infos(pre.groups.lists()), dcp_infos(dec.groups.lists()),
                          [len(r["prompt_ids"]) for r in requests])
    stash = _prefill(engine, requests, params) if mode == "prefill" else {}
    firsts = [{rid: s[1:] for rid, s in stash.items()}]
    dist.broadcast_object_list(firsts, src=d.prefill.ranks[0])
    rows = _move_rows(plan, stash, engine)
    results = _decode(engine, requests, params, firsts[0], rows) if mode == "decode" else {}
    return _collect(engine, results, d.decode.ranks[0], path, plan, len(requests))


def _prefill(engine: Engine, requests: list[dict], params: list[SamplingParams]) -> dict[int, tuple]:
    """rid -> (rows [layers, n, R] this rank owns of positions < L, first token, logprob, generator state)."""
    stash: dict[int, tuple] = {}

    def keep(seq: Sequence) -> None:
        # the sampled request's random stream continues on decode
        stash[seq.rid] = (engine.owned_prompt_rows(seq), seq.output[0], seq.logprobs[0],
                          engine.sampler.state(seq.rid))

    engine.finish_hooks.append(keep)
    for rid, (req, p) in enumerate(zip(requests, params)):
        engine.submit(rid, req["prompt_ids"], replace(p, max_new_tokens=1))
    engine.drain()
    return stash


def _move_rows(plan: list[Transfer], stash: dict[int, tuple], engine: Engine) -> dict[int, torch.Tensor]:
    """One send per (src, dst) pair in plan order; returns rid -> rows [layers, n, R] on a decode rank."""
    me, kv = dist.get_rank(), engine.pool.kv
    pairs: dict[tuple[int, int], list[Transfer]] = {}
    for t in plan:
        pairs.setdefault((t.src, t.dst), []).append(t)
    got: dict[int, torch.Tensor] = {}
    for (src, dst), ts in pairs.items():
        n = sum(len(t.positions) for t in ts)
        if n == 0 or me not in (src, dst):
            continue
        if me == src:
            idx = lambda t: torch.tensor(t.src_index, dtype=torch.int64, device=kv.device)  # noqa: E731
            dist.send(torch.cat([stash[t.rid][0].index_select(1, idx(t)) for t in ts], 1).contiguous(), dst)
            continue
        buf = torch.empty(kv.shape[0], n, kv.shape[2], dtype=kv.dtype, device=kv.device)
        dist.recv(buf, src)
        for t, part in zip(ts, buf.split([len(t.positions) for t in ts], 1)):
            got[t.rid] = part
    return got


def _decode(engine: Engine, requests: list[dict], params: list[SamplingParams], firsts: dict[int, tuple],
            rows: dict[int, torch.Tensor]) -> dict[int, dict]:
    """Admit each prefilled request with its transferred rows, then decode to completion."""
    results: dict[int, dict] = {}
    engine.finish_hooks.append(lambda seq: results.__setitem__(seq.rid, seq.result()))
    pending = []
    for rid, (req, p) in enumerate(zip(requests, params)):
        tok, lp, state = firsts[rid]
        seq = Sequence(rid, list(req["prompt_ids"]), p, output=[tok], logprobs=[lp],
                       computed=len(req["prompt_ids"]))
        seq.finish_reason = engine.stop_reason(seq)   # the prefill's first token may end it
        if seq.finish_reason:
            results[rid] = seq.result()
            continue
        if state is not None:
            engine.sampler.resume(rid, p.seed, state)
        pending.append(seq)

    def admit() -> None:  # in order, what fits; finished requests reach `results` through the finish hook
        while pending and engine.adopt(pending[0], rows.get(pending[0].rid)):
            pending.pop(0)

    engine.drain(before_step=admit)
    if pending:
        raise PDError(f"decode instance: request {pending[0].rid} needs "
                      f"{engine.alloc.pages_for(pending[0].max_kv)} pages, free_pages = "
                      f"{engine.alloc.free_pages}, nothing running to free more")
    return results


def _collect(engine: Engine, results: dict[int, dict], leader: int, path: str, plan: list[Transfer],
             n: int) -> dict:
    outputs, parts = engine.collect(results if dist.get_rank() == leader else {}, n)
    moved: dict[str, int] = {}
    for t in plan:
        key = f"{t.src}->{t.dst}"
        moved[key] = moved.get(key, 0) + len(t.positions)
    return {"outputs": outputs, "stats": {"kv_rows_per_rank": [p[1] for p in parts], "transfer": path,
                                          "rows_moved": moved}}
