"""Mixed steps beside the decode graphs (engine/mixed.py) on CPU, where a graph replay runs the captured step
eagerly on the same static buffers (engine/decode_graphs.py), float64, the tiny DeepSeek model: requests
decoding while long prompts arrive in chunks get every token they get alone, the split steps replay only their
decode rows, each request's events stream in order, a pool too small for the running set retracts and still
matches, and a step that cannot split runs as one eager forward with a note."""
import pytest
import torch

from dcpctl.runtime.engine import Engine, SamplingParams
from dcpctl.runtime.engine.mixed import KIND
from dcpctl.runtime.parallel import ParallelState
from tests.dist import run_ranks
from tests.runtime.configs import config
from tests.runtime.engine.test_engine import launch_cfg

DECODING = [  # running from the start; the arrivals' chunks land beside their decodes
    {"prompt_ids": [5, 1, 7], "max_new_tokens": 14, "logprobs": True},
    {"prompt_ids": [1, 2, 3, 4, 9], "max_new_tokens": 12, "logprobs": True},
    {"prompt_ids": [7, 3], "max_new_tokens": 15, "logprobs": True},
]
ARRIVING = [  # long prompts, several chunks each
    {"prompt_ids": [(3 * i + 1) % 11 + 1 for i in range(17)], "max_new_tokens": 5, "logprobs": True},
    {"prompt_ids": [(5 * i + 2) % 13 + 1 for i in range(13)], "max_new_tokens": 6, "logprobs": True},
]
REQUESTS = DECODING + ARRIVING
JOINS = {0: [0, 1, 2], 3: [3], 5: [4]}          # step index -> rids submitted before it
SAMPLED = dict(REQUESTS[1], temperature=0.8, top_k=10, seed=7)


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    from dcpctl.runtime.tiny import write_tiny_model
    return str(write_tiny_model(tmp_path_factory.mktemp("mixed") / "m", num_hidden_layers=2,
                                first_k_dense_replace=1))


def _engine(world, path, cfg, sizes):
    from dcpctl.runtime.models import load_model
    ps = (ParallelState.build(cfg["groups"], cfg["topology"]["attn_dp_size"])
          if world > 1 else ParallelState.single())
    model = load_model(path, ps, False, torch.float64, "cpu")
    cfg = dict(cfg, model={"path": path, "dtype": "float64"},
               cuda_graph={"batch_sizes": sizes, "reason": "cuda graphs: test"})
    cfg["decisions"]["attention_path"] = "paged"     # the graphs' path: eager prompt chunks take it too
    engine = Engine(model, ps, config(cfg))
    engine.warm_up()
    return engine


def _alone(path, requests):
    """Each request by itself, no graphs, one rank, a roomy pool."""
    def run(rank, world):
        engine = _engine(1, path, launch_cfg(1, 1, capacity=64, chunk=8), [])
        return [engine.generate([r])["outputs"][0] for r in requests]
    return run_ranks(run, 1)[0]


def _serve(rank, world, path, cfg, sizes, requests):
    """Submit per JOINS, step to the end: each request's events, the step kinds, the chunk sizes each graph
    run saw, per split step its graph rows, chunks and prompt tokens, the retractions and the mixed-step
    notes."""
    from dcpctl.runtime import notes
    # this engine's own
    notes._sent.difference_update([t for t in notes._sent if t.startswith("mixed steps")])
    engine = _engine(world, path, cfg, sizes)
    runs, run = [], engine.runner.graphs.replay
    engine.runner.graphs.replay = lambda *a: runs.append([ch.num_tokens for ch in a[1]]) or run(*a)
    events, kinds, split, step = {}, [], [], 0
    while step in JOINS or engine.busy or engine.sched.has_work():
        for rid in JOINS.get(step, []):
            engine.submit(rid, requests[rid]["prompt_ids"], SamplingParams.from_dict(requests[rid]))
        ran = len(runs)
        for ev in engine.step():
            events.setdefault(ev.rid, []).append((ev.token, ev.logprob, ev.finish))
        kinds.append(engine.last_step[0])
        if kinds[-1] == KIND:      # (graph rows, chunks, prompt tokens) of a split step
            rows = sum(len(r) for r in runs[ran:])
            split.append((rows, len(engine.last_step[1]),
                          sum(ch.num_tokens for ch in engine.last_step[1]) - rows))
        step += 1
    engine.check_drained()
    return {"events": events, "kinds": kinds, "runs": runs, "split": split,
            "retracted": engine.sched.retractions,
            "notes": [t for t in notes._sent if t.startswith("mixed steps")]}


def _same_streams(got, want):
    for rid, w in enumerate(want):
        n = len(w["output_ids"])
        assert [t for t, _, _ in got[rid]] == w["output_ids"], rid        # each token once, in order
        assert [lp for _, lp, _ in got[rid]] == pytest.approx(w["output_logprobs"], abs=1e-9)
        assert [bool(f) for _, _, f in got[rid]] == [False] * (n - 1) + [True]


@pytest.mark.parametrize("world,dcp,sampled", [(1, 1, False), (2, 2, False), (1, 1, True)])
def test_split_mixed_steps_equal_each_request_alone(path, world, dcp, sampled):
    requests = [SAMPLED if sampled and i == 1 else r for i, r in enumerate(REQUESTS)]
    want = _alone(path, requests)
    cfg = launch_cfg(world, dcp, 1, "a2a" if dcp > 1 else "ag_rs", capacity=128 // dcp, chunk=8)
    got = run_ranks(_serve, world, path, cfg, [1, 2, 4], requests)[0]
    kinds = got["kinds"]
    # 17 + 13 tokens, chunks of 8
    assert kinds.count(KIND) >= 5 and got["retracted"] == 0 and not got["notes"], kinds
    assert all(n == 1 for r in got["runs"] for n in r)
    assert (all(0 < rows < chunks for rows, chunks, _ in got["split"])
            and max(r for r, _, _ in got["split"]) == 4)
    # the decodes replay apart, so the prompt chunks take the whole budget of 8 beside them, never 8 - decodes
    assert all(p <= 8 for _, _, p in got["split"]) and any(p == 8 for _, _, p in got["split"]), got["split"]
    assert "graph+pipelined" in kinds     # decode-only steps between pipeline: a split step resolves them
                                          # first
    _same_streams(got["events"], want)


@pytest.mark.parametrize("world,dcp", [(1, 1), (2, 2)])
def test_a_small_pool_retracts_beside_split_steps_and_still_matches(path, world, dcp):
    want = _alone(path, REQUESTS)
    # 32 virtual positions per replica: every request fits alone (17 + 5), the running set does not
    cfg = launch_cfg(world, dcp, 1, "a2a" if dcp > 1 else "ag_rs", capacity=32 // dcp, chunk=8)
    cfg["schedule"] = {"mixed_chunk": True, "decode_headroom": 1}
    got = run_ranks(_serve, world, path, cfg, [1, 2, 4], REQUESTS)[0]
    assert got["retracted"] > 0 and KIND in got["kinds"], got["kinds"]
    _same_streams(got["events"], want)


def test_more_decodes_than_the_largest_graph_run_one_eager_forward(path):
    want = _alone(path, REQUESTS)
    got = run_ranks(_serve, 1, path, launch_cfg(1, 1, capacity=128, chunk=8), [1, 2], REQUESTS)[0]
    assert KIND in got["kinds"] and max(len(r) for r in got["runs"]) <= 2
    assert any("largest captured batch size (2" in t for t in got["notes"]), got["notes"]
    _same_streams(got["events"], want)


def test_engines_that_cannot_split_say_why(path):
    def off(rank, world, dp, sizes):
        cfg = launch_cfg(world, 1, dp, capacity=64, chunk=8)
        return _engine(world, path, cfg, sizes).runner.split_off
    assert "no decode graphs" in run_ranks(off, 1, 1, [])[0]
    assert "attention DP 2" in run_ranks(off, 2, 2, [1, 2])[0]
    assert run_ranks(off, 1, 1, [1, 2])[0] is None
