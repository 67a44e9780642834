"""The serving loop on forked gloo ranks: tensor control messages, joins at step boundaries,
cancellation, attention-DP event gathering; outputs equal generate() and every page comes back."""
import pytest

from dcpctl.runtime.engine import Engine, SamplingParams
from dcpctl.runtime.engine.events import Event
from dcpctl.runtime.parallel import ParallelState
from dcpctl.runtime.server.control import Control, NewRequest, decode, encode
from dcpctl.runtime.server.loop import run_loop
from tests.dist import run_ranks
from tests.runtime.configs import config
from tests.runtime.engine.test_engine import REQUESTS, FakeMLA, launch_cfg


def test_control_round_trip():
    p = SamplingParams(max_new_tokens=7, temperature=0.5, top_k=3, top_p=0.9, seed=2**40, logprobs=True,
                       ignore_eos=True)
    msg = Control([NewRequest(4, [1, 2, 3], p), NewRequest(9, [8], SamplingParams())], [2, 5], True)
    assert decode(*encode(msg)) == msg
    assert decode(*encode(Control())) == Control()


class ScriptedBridge:
    """Rank 0's inbox: submits per step index, a cancel, then shutdown once every request ended."""

    def __init__(self, joins: dict[int, list[int]], cancel_at: dict[int, int], requests: dict[int, dict]):
        self.joins, self.cancel_at, self.requests, self.step = joins, cancel_at, requests, 0
        self.events: dict[int, list[Event]] = {}
        self.open = set()

    def take(self, wait: bool) -> Control:
        msg = Control()
        for rid in self.joins.get(self.step, []):
            r = self.requests[rid]
            msg.new.append(NewRequest(rid, r["prompt_ids"], SamplingParams.from_dict(r)))
            self.open.add(rid)
        for rid, at in self.cancel_at.items():
            if at == self.step and rid in self.open:
                msg.cancel.append(rid)
                self.open.discard(rid)
        msg.shutdown = not self.open and self.step > max(self.joins)
        self.step += 1
        return msg

    def deliver(self, events):
        for ev in events:
            self.events.setdefault(ev.rid, []).append(ev)
            if ev.finish:
                self.open.discard(ev.rid)


def _serve(rank, world, cfg, joins, cancel_at, requests=dict(enumerate(REQUESTS))):
    ps = (ParallelState.build(cfg["groups"], cfg["topology"]["attn_dp_size"])
          if world > 1 else ParallelState.single())
    cfg["kv"]["max_running_requests"] = 2
    engine = Engine(FakeMLA(ps, cfg["decisions"]["dcp_replicate_q_proj"]), ps, config(cfg))
    bridge = ScriptedBridge(joins, cancel_at, requests) if rank == 0 else None
    run_loop(engine, None, bridge)  # raises unless every page is free again at shutdown
    return None if bridge is None else {rid: [(e.token, e.logprob, e.finish) for e in evs]
                                        for rid, evs in bridge.events.items()}


@pytest.fixture(scope="module")
def reference():
    return run_ranks(lambda rank, world: Engine(FakeMLA(ParallelState.single(), False),
                                                ParallelState.single(), config(launch_cfg(1, 1)))
                     .generate(REQUESTS), 1)[0]["outputs"]


@pytest.mark.parametrize("world,dcp,dp", [(2, 2, 1), (4, 2, 2)])
def test_loop_matches_generate_with_joins_and_a_cancel(reference, world, dcp, dp):
    joins = {0: [0, 1], 2: [2], 3: [3]}      # requests join at later step boundaries
    cancel_at = {1: 2}                        # request 1 is cancelled after two steps
    got = run_ranks(_serve, world, launch_cfg(world, dcp, dp, capacity=16 // dcp + 2), joins, cancel_at)[0]
    for rid in (0, 2, 3):
        want = reference[rid]
        assert [t for t, _, _ in got[rid]] == want["output_ids"]
        assert [lp for _, lp, _ in got[rid]] == pytest.approx(want["output_logprobs"], abs=1e-9)
        assert got[rid][-1][2] == "length" and all(f == "" for _, _, f in got[rid][:-1])
    assert len(got.get(1, [])) < len(reference[1]["output_ids"])   # cancelled before its end


def test_refused_request_ends_with_abort_and_the_loop_goes_on(reference):
    requests = {0: REQUESTS[0], 7: {"prompt_ids": list(range(1, 30)), "max_new_tokens": 4}}  # > capacity 10
    got = run_ranks(_serve, 2, launch_cfg(2, 2, capacity=5), {0: [7, 0]}, {}, requests)[0]
    assert got[7] == [(-1, 0.0, "abort")]
    assert [t for t, _, _ in got[0]] == reference[0]["output_ids"]


def test_step_trace_puts_each_replay_time_on_its_step(tmp_path):
    # rows carry the replay count after their step: a row whose count grew replayed graph count - 1; its gap
    # is the GPU time from the previous replay's end to its start
    import json
    from dcpctl.runtime.server.loop import TRACE_FIELDS, _write_trace

    class Ev:
        def __init__(self, t):
            self.t = t

        def elapsed_time(self, other):
            return other.t - self.t
    gpu = [(Ev(0.0), Ev(0.7)), (Ev(0.75), Ev(1.5))]
    ph = (0.1, 0.2, 0.3, 0.4)     # the phases' host seconds (engine/phases.py), passed through
    rows = [(0, 0, 0, 0, "eager", 1, 9, 1, *ph, 0), (1, 1, 1, 1, "graph+pipelined", 1, 1, 1, *ph, 1),
            (2, 2, 2, 2, "resolve", 0, 0, 1, *ph, 1), (3, 3, 3, 3, "graph+pipelined", 1, 1, 1, *ph, 2)]
    _write_trace(str(tmp_path / "t.json"), rows, gpu)
    doc = json.loads((tmp_path / "t.json").read_text())
    got = [dict(zip(doc["fields"], r)) for r in doc["rows"]]
    assert doc["fields"] == TRACE_FIELDS and len(got) == 4
    assert [g["gpu_ms"] for g in got] == [None, 0.7, None, 0.75]
    assert got[1]["gpu_gap_ms"] is None and abs(got[3]["gpu_gap_ms"] - 0.05) < 1e-12
    assert [got[3][f] for f in ("prepare_s", "graph_launch_s", "sampling_s", "resolve_s")] == list(ph)
