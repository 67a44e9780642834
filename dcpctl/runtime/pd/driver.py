"""PD disaggregation in one torch.distributed world: a prefill instance and a decode instance.

    run_pd(cfg, requests, make_model=None, eos_token_id=None) -> {"outputs": [...], "stats": {...}}

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

from dcpctl.runtime.engine.engine import DTYPES, Engine
from dcpctl.runtime.engine.request import SamplingParams, Sequence
from dcpctl.runtime.kv.allocator import owned_rows
from dcpctl.runtime.parallel import GROUP_KINDS, ParallelState
from dcpctl.runtime.pd.plan import PDError, Transfer, dcp_infos, plan_transfers, transfer_path

MODES = ("prefill", "decode")
_SHARED = ("version", "model", "device", "dist_backend")


def instance_config(cfg: dict, mode: str) -> dict:
    """The plain launch config (docs/launch-config.md) of one instance, with disaggregation_mode set."""
    if mode not in MODES:
        raise PDError(f"disaggregation mode {mode!r} is not one of {list(MODES)}")
    inst = cfg["disaggregation"][mode]
    if int(inst["topology"].get("attn_dp_size", 1)) != 1:
        raise PDError(f"{mode} instance: attn_dp_size ({inst['topology']['attn_dp_size']}) != 1; the bundled "
                      "PD driver runs one replica per instance")
    out = {k: cfg[k] for k in _SHARED if k in cfg}
    out.update({k: inst[k] for k in ("topology", "groups", "decisions", "kv")})
    out.update(world_size=len(inst["ranks"]), disaggregation_mode=mode)
    return out


def _states(pre: dict, dec: dict, mode: str) -> ParallelState:
    # every rank creates every group in one order; only its own instance's become a ParallelState
    ps = None
    for m, inst in (("prefill", pre), ("decode", dec)):
        if m == mode:
            ps = ParallelState.build(inst["groups"], 1)
        else:
            for kind in GROUP_KINDS:
                for ranks in inst["groups"][kind]:
                    if len(ranks) > 1:
                        dist.new_group(ranks)
    return ps


def _default_model(ps: ParallelState, cfg: dict) -> Any:
    from dcpctl.runtime.models import load_model  # heavy; import late
    return load_model(cfg["model"]["path"], ps, cfg.get("decisions", {}), DTYPES[cfg["model"]["dtype"]],
                      torch.device(cfg.get("device", "cpu")))


def run_pd(cfg: dict, requests: list[dict], make_model: Callable[[ParallelState, dict], Any] | None = None,
           eos_token_id: Any = None) -> dict:
    """Prefill on the prefill ranks, move rows, decode on the decode ranks; the result on every rank."""
    d = cfg["disaggregation"]
    pre, dec = instance_config(cfg, "prefill"), instance_config(cfg, "decode")
    path = transfer_path(pre["topology"]["dcp_size"], dec["topology"]["dcp_size"])
    if d.get("transfer", path) != path:
        raise PDError(f"launch config transfer ({d['transfer']}) != {path} for these DCP sizes")
    if pre["kv"]["page_size"] != dec["kv"]["page_size"]:
        raise PDError(f"prefill page_size ({pre['kv']['page_size']}) != decode page_size ({dec['kv']['page_size']})")
    mode = "prefill" if dist.get_rank() in d["prefill"]["ranks"] else "decode"
    ps = _states(pre, dec, mode)
    mine = pre if mode == "prefill" else dec
    engine = Engine((make_model or _default_model)(ps, mine), ps, mine, eos_token_id)
    params = [SamplingParams.from_dict(r) for r in requests]
    plan = plan_transfers(dcp_infos(pre["groups"]), dcp_infos(dec["groups"]),
                          [len(r["prompt_ids"]) for r in requests])
    stash = _prefill(engine, requests, params) if mode == "prefill" else {}
    firsts = [{rid: s[1:] for rid, s in stash.items()}]
    dist.broadcast_object_list(firsts, src=d["prefill"]["ranks"][0])
    rows = _move_rows(plan, stash, engine)
    results = _decode(engine, requests, params, firsts[0], rows) if mode == "decode" else {}
    return _collect(engine, results, d["decode"]["ranks"][0], path, plan, len(requests))


def _prefill(engine: Engine, requests: list[dict], params: list[SamplingParams]) -> dict[int, tuple]:
    """rid -> (rows [layers, n, R] this rank owns of positions < L, first token, logprob, generator state)."""
    stash: dict[int, tuple] = {}
    c, r = engine.ps.dcp.size, engine.ps.dcp.rank

    def keep(seq: Sequence) -> None:
        slots = engine.alloc.slots(seq.rid)
        phys = torch.tensor(owned_rows(slots, 0, len(seq.prompt), r, c), dtype=torch.int64,
                            device=engine.pool.kv.device)
        # the sampled request's random stream continues on decode
        stash[seq.rid] = (engine.pool.kv.index_select(1, phys), seq.output[0], seq.logprobs[0],
                          engine.sampler.state(seq.rid))

    engine.finish_hooks.append(keep)
    for rid, (req, p) in enumerate(zip(requests, params)):
        engine.submit(rid, req["prompt_ids"], replace(p, max_new_tokens=1))
    _drain(engine)
    return stash


def _drain(engine: Engine) -> None:
    while True:
        engine.step()
        if not engine.busy:
            return


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
        seq = Sequence(rid, list(req["prompt_ids"]), p, output=[tok], logprobs=[lp], computed=len(req["prompt_ids"]))
        if tok in engine.eos and not p.ignore_eos:
            seq.finish_reason = "stop"
        elif p.max_new_tokens <= 1:
            seq.finish_reason = "length"
        if seq.finish_reason:
            results[rid] = seq.result()
            continue
        if state is not None:
            engine.sampler.resume(rid, p.seed, state)
        pending.append(seq)
    while True:
        pending = _admit(engine, pending, rows)
        engine.step()  # finished requests reach `results` through the finish hook
        if not engine.busy:
            if pending:
                raise PDError(f"decode instance: request {pending[0].rid} needs "
                              f"{engine.alloc.pages_for(pending[0].max_kv)} pages, free_pages = "
                              f"{engine.alloc.free_pages}, nothing running to free more")
            return results


def _admit(engine: Engine, pending: list[Sequence], rows: dict[int, torch.Tensor]) -> list[Sequence]:
    """Allocate what fits (in order) and write its rows at this rank's own physical slots."""
    c, r = engine.ps.dcp.size, engine.ps.dcp.rank
    while pending and engine.alloc.can_allocate(pending[0].max_kv):
        seq = pending.pop(0)
        slots = engine.alloc.allocate(seq.rid, seq.max_kv)
        phys = owned_rows(slots, 0, len(seq.prompt), r, c)
        if phys:
            idx = torch.tensor(phys, dtype=torch.int64, device=engine.pool.kv.device)
            engine.pool.kv.index_copy_(1, idx, rows[seq.rid].to(engine.pool.kv.dtype))
        engine.sched.running.append(seq)
    return pending


def _collect(engine: Engine, results: dict[int, dict], leader: int, path: str, plan: list[Transfer],
             n: int) -> dict:
    mine = (results if dist.get_rank() == leader else {}, engine.kv_rows)
    parts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(parts, mine)
    done = {k: v for p in parts for k, v in p[0].items()}
    missing = sorted(set(range(n)) - set(done))
    if missing:
        raise RuntimeError(f"requests {missing} produced no result")
    moved: dict[str, int] = {}
    for t in plan:
        key = f"{t.src}->{t.dst}"
        moved[key] = moved.get(key, 0) + len(t.positions)
    stats = {"kv_rows_per_rank": [p[1] for p in parts], "transfer": path, "rows_moved": moved}
    return {"outputs": [done[i] for i in range(n)], "stats": stats}
