"""Kimi Linear (KDA + MLA hybrid) through the engine: DCP stripes only MLA layers, KDA state is
request-indexed; every layout equals DCP = 1 (float64) and the state pool bounds concurrency."""
import pytest

from dcpctl.runtime.tiny_kimi import write_tiny_kimi_model
from dcpctl.runtime.worker import run_worker
from tests.dist import run_ranks
from tests.runtime.configs import config
from tests.runtime.engine.test_engine import launch_cfg

REQUESTS = [
    {"prompt_ids": [3], "max_new_tokens": 4, "logprobs": True},          # shorter than dcp
    {"prompt_ids": [11, 2, 7, 30], "max_new_tokens": 5, "logprobs": True},
    {"prompt_ids": [5, 9, 14, 2, 8, 40, 6, 1, 17, 22, 3, 9, 12], "max_new_tokens": 3, "logprobs": True},
]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return str(write_tiny_kimi_model(tmp_path_factory.mktemp("kimi") / "m"))


def _cfg(path, world, dcp, backend="a2a"):
    cfg = launch_cfg(world, dcp, 1, backend, False, capacity=64, chunk=6)
    cfg["model"]["path"] = path
    return cfg


def _run(rank, world, cfg, max_running):
    from dcpctl.runtime.engine.engine import Engine
    from dcpctl.runtime.models import load_model
    from dcpctl.runtime.boot import build_state
    import torch
    if max_running is None:
        return run_worker(config(cfg), REQUESTS)
    cfg["kv"]["max_running_requests"] = max_running
    typed_cfg = config(cfg)
    ps = build_state(typed_cfg)
    model = load_model(cfg["model"]["path"], ps, cfg["decisions"]["dcp_replicate_q_proj"], torch.float64,
                       "cpu")
    eng = Engine(model, ps, typed_cfg)
    out = eng.generate(REQUESTS)
    return out, model.kda_pool.slots, model.kda_pool.used, eng.alloc.free_pages == eng.alloc.num_pages


@pytest.fixture(scope="module")
def reference(ckpt):
    return run_ranks(_run, 1, _cfg(ckpt, 1, 1), None)[0]


@pytest.mark.parametrize("world,dcp,backend", [(2, 2, "ag_rs"), (4, 4, "a2a")])
def test_kimi_linear_matches_dcp1(ckpt, reference, world, dcp, backend):
    got = run_ranks(_run, world, _cfg(ckpt, world, dcp, backend), None)[0]
    for want, out in zip(reference["outputs"], got["outputs"]):
        assert out["output_ids"] == want["output_ids"]
        assert out["output_logprobs"] == pytest.approx(want["output_logprobs"], abs=1e-9)


def test_kda_slots_bound_concurrency_and_are_returned(ckpt, reference):
    out, slots, used, drained = run_ranks(_run, 2, _cfg(ckpt, 2, 2), 1)[0]
    assert slots == 1 and used == 0 and drained  # one request at a time, every slot and page back
    assert [o["output_ids"] for o in out["outputs"]] == [o["output_ids"] for o in reference["outputs"]]


LONG = [{"prompt_ids": [3, 8], "max_new_tokens": 12, "logprobs": True},
        {"prompt_ids": [11, 2, 7], "max_new_tokens": 12, "logprobs": True},
        {"prompt_ids": [5, 9], "max_new_tokens": 10, "logprobs": True}]


def test_retraction_releases_the_kda_slot_and_recomputes_its_state(ckpt):
    """A 16-position pool (DCP 2, 8 rows per rank): requests are retracted, their KDA state slot freed; on
    return the state is rebuilt from position 0 with the MLA KV, and the outputs still equal DCP 1 with
    room."""
    want = run_ranks(lambda rank, world: run_worker(config(_cfg(ckpt, 1, 1)), LONG), 1)[0]["outputs"]
    cfg = _cfg(ckpt, 2, 2)
    cfg["kv"]["capacity_tokens"], cfg["schedule"] = 8, {"decode_headroom": 1}

    def run(rank, world):
        import torch
        from dcpctl.runtime.boot import build_state
        from dcpctl.runtime.engine.engine import Engine
        from dcpctl.runtime.models import load_model
        typed_cfg = config(cfg)
        ps = build_state(typed_cfg)
        model = load_model(cfg["model"]["path"], ps, False, torch.float64, "cpu")
        eng = Engine(model, ps, typed_cfg)
        out = eng.generate(LONG)
        eng.check_drained()
        return out, eng.sched.retractions, model.kda_pool.used
    got, retracted, used = run_ranks(run, 2)[0]
    assert retracted > 0 and used == 0
    for w, out in zip(want, got["outputs"]):
        assert out["output_ids"] == w["output_ids"]
        assert out["output_logprobs"] == pytest.approx(w["output_logprobs"], abs=1e-9)
