"""An emulated rank (stand-in groups, synthetic weights) runs the same decode step as the real rank of the
same plan.

Real: every rank of the plan forked as a gloo process, loading the tiny checkpoint.  Emulated: rank R alone,
its groups stand-in groups, its weights generated from the same config.json.  Both run one decode step of
`bench rank` (bench/rank_cell.py: the serving engine's decode graph with lm_head, replayed eagerly on the CPU)
under the same fixed MoE routing, and rank R's two runs must make the same collectives (kind, axis, group
size, shape, dtype, bytes, order) and the same aten operations (name, tensor shapes and dtypes, order; outside
the collectives themselves, and views aside); the emulated rank's weight bytes are the plan's within 1% (the
checkpoint's own load is compared in tests/runtime/models/test_synthetic.py: a CPU load of an fp32 checkpoint
keeps views of whole safetensors tensors, so its storages overcount there).
"""
from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

from dcpctl.bench import rank_routing
from dcpctl.bench.rank_cell import Cell
from dcpctl.bench.rank_setup import load, resolve
from dcpctl.launch.config import render_launch_config
from dcpctl.plan.planner import make_plan
from dcpctl.plan.resolve import request_from_options
from dcpctl.runtime.models import load_model
from dcpctl.runtime.models.footprint import weight_bytes
from dcpctl.runtime.parallel import ParallelState
from dcpctl.runtime.standin import StandinGroup
from dcpctl.runtime.tiny import write_tiny_model
from tests.dist import run_ranks

BATCH, CTX = 3, 21
REAL = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor", "all_gather_single",
        "reduce_scatter_single", "all_to_all_single", "broadcast")
STANDIN = ("all_reduce", "all_gather_list", "all_gather_into", "reduce_scatter_into", "all_to_all_into")
VIEWS = {"aten.view.default", "aten._unsafe_view.default", "aten.view.dtype"}


class Ops(TorchDispatchMode):
    """Every aten op outside a collective call: (name, shapes and dtypes of its tensor arguments)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple] = []
        self.inside = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.inside and str(func) not in VIEWS:
            flat = [a for a in (*args, *(kwargs or {}).values())
                    for a in (a if isinstance(a, (list, tuple)) else [a])]
            self.ops.append((str(func),
                             tuple((tuple(a.shape), a.dtype) for a in flat if isinstance(a, torch.Tensor))))
        return func(*args, **(kwargs or {}))


def _fenced(ops: Ops) -> list[tuple[Any, str, Any]]:
    # every collective (torch.distributed's or a stand-in's) made opaque to the op trace
    saved = [(dist, n, getattr(dist, n)) for n in REAL if hasattr(dist, n)]
    saved += [(StandinGroup, n, getattr(StandinGroup, n)) for n in STANDIN]
    for owner, name, fn in saved:
        def fenced(*a, _fn=fn, **k):
            ops.inside += 1
            try:
                return _fn(*a, **k)
            finally:
                ops.inside -= 1
        setattr(owner, name, fenced)
    return saved


def _plan(path, **topology):
    opts = {"model_path": str(path), "hardware": "cpu", "context_len": 64, **topology}
    plan = make_plan(request_from_options(opts))
    return plan, render_launch_config(plan, path, "float32", "cpu", 4096, 8192).for_serving()


def _step(model: Any, launch: Any, ids: torch.Tensor) -> dict[str, Any]:
    routers = rank_routing.install(model, BATCH * launch.topology.attn_dp_size)
    rank_routing.choose(routers, model.cfg, "uniform", BATCH * launch.topology.attn_dp_size, model.ps.ep.size,
                        model.ps.ep.rank)
    cell = Cell(model, launch.decisions, BATCH, CTX, launch.kv.page_size, launch.kv.capacity_tokens, ids)
    ops = Ops()
    saved = _fenced(ops)
    try:
        with ops:
            cell.graphs.replay(cell.ids, cell.chunks)
    finally:
        for owner, name, fn in saved:
            setattr(owner, name, fn)
    return {"calls": cell.calls, "ops": ops.ops}


def _ids(launch: Any, rank: int, vocab: int) -> torch.Tensor:
    # rank R's vocabulary slice, fed to every rank of its replica (they feed equal ids in a served step)
    vp = -(-vocab // launch.topology.attn_tp_size)
    start = rank % launch.topology.attn_tp_size * vp
    return start + torch.arange(BATCH) % min(vp, vocab - start)


def _real(rank: int, world: int, path, topology: dict, me: int) -> dict[str, Any]:
    plan, launch = _plan(path, **topology)
    ps = ParallelState.build(launch.groups.lists(), launch.topology.attn_dp_size)
    model = load_model(path, ps, launch.decisions.dcp_replicate_q_proj, torch.float32)
    return _step(model, launch, _ids(launch, me, model.cfg.vocab_size))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny"), num_hidden_layers=2)


@pytest.mark.parametrize("topology,me", [
    ({"tp_size": 4, "dcp_size": 2}, 3),
    ({"tp_size": 4, "dcp_size": 2, "dcp_comm_backend": "a2a", "dcp_replicate_q_proj": True}, 2),
    ({"tp_size": 4, "dcp_size": 2, "ep_size": 4}, 1),
    ({"tp_size": 4, "dcp_size": 2, "dp_size": 2, "enable_dp_attention": True}, 2),
], ids=["tp4-dcp2", "a2a-replicated-q", "ep4", "attn-dp2"])
def test_an_emulated_rank_steps_as_the_real_rank(tiny, tmp_path, topology, me):
    real = run_ranks(_real, 4, tiny, topology, me)[me]
    plan, launch = _plan(tiny, **topology)
    run = resolve(plan, launch, me, None, "cpu")
    model = load(run, tmp_path / "config", torch.float32)
    loaded = weight_bytes(model)          # before the routing wrappers (not weights) replace the routers
    emulated = _step(model, launch, _ids(launch, me, model.cfg.vocab_size))
    assert emulated["calls"] == real["calls"]
    assert {c.group for c in real["calls"]} >= {"attn_tp", "dcp"}
    assert emulated["ops"] == real["ops"]
    planned = run.plan_bytes(run.spec_run())
    assert abs(loaded - planned) <= 0.01 * planned


def test_the_served_phase_decodes_adopted_requests_on_stand_in_groups(tiny, tmp_path):
    from dcpctl.bench.rank_served import STEPS, WARM, served_engine
    plan, launch = _plan(tiny, tp_size=4, dcp_size=2, dp_size=2, enable_dp_attention=True)
    model = load(resolve(plan, launch, 3, None, "cpu"), tmp_path / "config", torch.float32)
    engine = served_engine(model, launch, BATCH, 40)
    assert engine.runner.graphs is not None and len(engine.sched.running) == BATCH
    events, kinds = [], set()
    for _ in range(WARM + STEPS + 8):
        events += engine.step()
        kinds.add(engine.last_step[0])
    assert sorted(e.rid for e in events if e.finish) == list(range(BATCH))  # every request ran to its length
    assert kinds - {"idle", "resolve"} == {"graph"}  # every decode step replayed a graph


def test_a_wrapped_router_keeps_the_fields_code_reads_off_routers():
    # the FP8 precompile (models/fp8_precompile.py) reads mlp.router.cfg.top_k off every MoE layer
    from types import SimpleNamespace

    from dcpctl.bench.rank_routing import FixedRouting
    inner = SimpleNamespace(cfg=SimpleNamespace(top_k=3), weight="w")
    wrapped = FixedRouting(inner, 4, torch.device("cpu"))
    assert wrapped.cfg is inner.cfg and wrapped.weight == "w" and wrapped.idx.shape == (4, 3)
    with pytest.raises(AttributeError):
        wrapped.missing
