"""Mixed steps and retraction on forked gloo ranks (the fake MLA model of test_engine): every request's tokens
and logprobs equal those of the request run alone at DCP 1, whether steps mix, prompts are chunked, the pool
is too small for the running set (requests are retracted and recompute), or tokens are streamed through the
serving loop; every page comes back."""
import pytest

from dcpctl.runtime.engine import Engine
from dcpctl.runtime.parallel import ParallelState
from dcpctl.runtime.server.loop import run_loop
from tests.dist import run_ranks
from tests.runtime.configs import config
from tests.runtime.engine.test_engine import REQUESTS, FakeMLA, launch_cfg
from tests.runtime.engine.test_engine_serve import ScriptedBridge

LONG = [  # each alone needs <= 16 virtual positions; together far more than a 24-token pool
    {"prompt_ids": [5, 1, 7], "max_new_tokens": 12, "logprobs": True},
    {"prompt_ids": [1, 2, 3, 4, 9], "max_new_tokens": 10, "logprobs": True},
    {"prompt_ids": [7, 3], "max_new_tokens": 13, "logprobs": True},
    {"prompt_ids": [2, 9, 4, 6], "max_new_tokens": 11, "temperature": 0.8, "top_k": 10, "seed": 3,
     "logprobs": True},
]


def _engine(rank, world, cfg):
    ps = (ParallelState.build(cfg["groups"], cfg["topology"]["attn_dp_size"])
          if world > 1 else ParallelState.single())
    return Engine(FakeMLA(ps, cfg["decisions"]["dcp_replicate_q_proj"]), ps, config(cfg))


def _generate(rank, world, cfg, requests):
    engine = _engine(rank, world, cfg)
    out = engine.generate(requests)
    engine.check_drained()
    return out["outputs"], engine.sched.retractions


def _alone(requests):
    """Each request by itself on one rank (DCP 1, roomy pool)."""
    def run(rank, world):
        engine = _engine(rank, world, launch_cfg(1, 1, capacity=64))
        return [engine.generate([r])["outputs"][0] for r in requests]
    return run_ranks(run, 1)[0]


def _same(got, want):
    for w, o in zip(want, got):
        assert o["output_ids"] == w["output_ids"]
        assert o["output_logprobs"] == pytest.approx(w["output_logprobs"], abs=1e-9)


def _cfg(world, dcp, dp=1, capacity=64, chunk=5, headroom=20, mixed=True, hicache=False):
    cfg = launch_cfg(world, dcp, dp, "a2a" if dcp > 1 else "ag_rs", capacity=capacity, chunk=chunk)
    cfg["schedule"] = {"mixed_chunk": mixed, "decode_headroom": headroom}
    if hicache:
        cfg["hicache"] = {"host_pages": 4}
    return cfg


@pytest.mark.parametrize("world,dcp,dp,chunk,mixed", [
    (1, 1, 1, 5, True), (2, 2, 1, 5, True), (2, 2, 1, 3, False), (4, 2, 2, 5, True), (2, 2, 1, -1, True)])
def test_batched_steps_equal_each_request_alone(world, dcp, dp, chunk, mixed):
    want = _alone(REQUESTS)
    outputs, retracted = run_ranks(_generate, world, _cfg(world, dcp, dp, 64 // dcp, chunk, mixed=mixed),
                                   REQUESTS)[0]
    _same(outputs, want)
    assert retracted == 0


@pytest.mark.parametrize("world,dcp,dp,hicache", [(1, 1, 1, False), (2, 2, 1, False), (4, 2, 2, False),
                                                  (2, 2, 1, True)])
def test_a_pool_too_small_retracts_and_every_request_still_matches(world, dcp, dp, hicache):
    want = _alone(LONG)
    # 24 virtual positions per replica: every request fits alone, the running set does not
    results = run_ranks(_generate, world,
                        _cfg(world, dcp, dp, 24 // dcp, chunk=4, headroom=1, hicache=hicache), LONG)
    outputs, retracted = results[0]
    _same(outputs, want)
    assert all(r[1] > 0 for r in results)       # every replica ran short and retracted


def _serve(rank, world, cfg, joins):
    engine = _engine(rank, world, cfg)
    bridge = ScriptedBridge(joins, {}, dict(enumerate(LONG))) if rank == 0 else None
    run_loop(engine, None, bridge)      # raises unless every page is free again at shutdown
    if bridge is None:
        return None
    return {rid: [(e.token, e.logprob, e.finish) for e in evs] for rid, evs in bridge.events.items()}, \
        engine.sched.retractions


@pytest.mark.parametrize("world,dcp", [(1, 1), (2, 2)])
def test_streams_pause_through_a_retraction_never_repeat_or_skip(world, dcp):
    want = _alone(LONG)
    got, retracted = run_ranks(_serve, world, _cfg(world, dcp, 1, 24 // dcp, chunk=4, headroom=1),
                               {0: [0, 1], 3: [2], 5: [3]})[0]
    assert retracted > 0
    for rid, w in enumerate(want):
        assert [t for t, _, _ in got[rid]] == w["output_ids"]          # each token once, in order
        assert [lp for _, lp, _ in got[rid]] == pytest.approx(w["output_logprobs"], abs=1e-9)
        assert [f for _, _, f in got[rid]] == [""] * (len(w["output_ids"]) - 1) + ["length"]


def test_stop_early_requests_with_a_large_max_tokens_run_all_at_once():
    """The early-stop batch: 16 requests of max_tokens 1800 on a 4,096-token pool that a stop string ends
    after 4-69 tokens (the server cancels them then) all run together: admission counts the KV they hold, not
    what max_tokens could reach."""
    reqs = [{"prompt_ids": [1 + (i * 7 + j) % 39 for j in range(30 + i)], "max_new_tokens": 1800}
            for i in range(16)]
    stop_at = [4 + 13 * i % 66 for i in range(16)]

    def run(rank, world):
        from dcpctl.runtime.engine import SamplingParams
        engine = _engine(rank, world, _cfg(1, 1, capacity=4096, chunk=512))
        for i, r in enumerate(reqs):
            engine.submit(i, r["prompt_ids"], SamplingParams.from_dict(r))
        most, steps = 0, 0
        while engine.sched.has_work() and steps < 200:
            engine.step()
            most, steps = max(most, len(engine.sched.running)), steps + 1
            for seq in list(engine.sched.running):
                if len(seq.output) >= stop_at[seq.rid]:
                    engine.cancel(seq.rid)
        engine.check_drained()
        return most, engine.sched.retractions, steps
    most, retracted, steps = run_ranks(run, 1)[0]
    assert (most, retracted) == (16, 0) and steps == max(stop_at)   # a token per step, the first from the
                                                                    # prefill


GREEDY = [dict(r, temperature=0.0, top_k=-1) for r in LONG]


def _graphs(rank, world, path, cfg):
    """generate() with decode graphs (replayed eagerly on CPU) and pipelined greedy steps; (outputs,
    retractions, pipelined steps)."""
    import torch

    import dcpctl.runtime.engine.pipeline as pipe_mod
    from dcpctl.runtime.models import load_model
    ps = (ParallelState.build(cfg["groups"], cfg["topology"]["attn_dp_size"])
          if world > 1 else ParallelState.single())
    model = load_model(path, ps, False, torch.float64, "cpu")
    cfg = dict(cfg, model={"path": path, "dtype": "float64"},
               cuda_graph={"batch_sizes": [1, 2, 4], "reason": "cuda graphs: test"})
    cfg["decisions"]["attention_path"] = "paged"
    engine = Engine(model, ps, config(cfg))
    engine.warm_up()
    pipelined, launch = [], pipe_mod.launch_sampling
    pipe_mod.launch_sampling = (lambda both, seqs, rows:
                                pipelined.append(len(seqs)) or launch(both, seqs, rows))
    try:
        out = engine.generate(GREEDY)
    finally:
        pipe_mod.launch_sampling = launch
    engine.check_drained()
    return out["outputs"], engine.sched.retractions, len(pipelined)


@pytest.mark.parametrize("world,dcp", [(1, 1), (2, 2)])
def test_retraction_while_a_pipelined_step_is_in_flight(tmp_path, world, dcp):
    """The scheduler reads the step in flight before it retracts (a retracted request recomputes real ids)."""
    from dcpctl.runtime.tiny import write_tiny_model
    path = str(write_tiny_model(tmp_path / "m", num_hidden_layers=2, first_k_dense_replace=1))
    roomy = run_ranks(_graphs, 1, path, _cfg(1, 1, capacity=64))[0]
    got = run_ranks(_graphs, world, path, _cfg(world, dcp, 1, 24 // dcp, chunk=4, headroom=1))[0]
    assert roomy[1] == 0 and got[1] > 0 and got[2] > 0
    _same(got[0], roomy[0])


def test_retractions_reach_metrics_once_per_replica():
    from dcpctl.runtime.engine.events import ReplicaStats
    from dcpctl.runtime.server.metrics import Metrics
    m = Metrics(attn_tp_size=2)
    # two replicas of two ranks each: a replica's ranks report the same cumulative count
    m.on_step([], [ReplicaStats(0, 1, 4, 8, 2)] * 2 + [ReplicaStats(0, 1, 4, 8, 1)] * 2, 0.01)
    m.on_step([], [ReplicaStats(0, 1, 4, 8, 3)] * 2 + [ReplicaStats(0, 1, 4, 8, 1)] * 2, 0.01)
    assert "dcpctl_retracted_requests_total 4.0" in m.render().decode()
