"""Kimi Linear (KDA + MLA hybrid) through the engine: DCP stripes only MLA layers, KDA state is
request-indexed; every layout equals DCP = 1 (float64) and the state pool bounds concurrency."""
import pytest

from dcpctl.runtime.tiny_kimi import write_tiny_kimi_model
from dcpctl.runtime.worker import run_worker
from tests.dist import run_ranks
from tests.runtime.test_engine import launch_cfg

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
    from dcpctl.plan.hf_config import eos_token_ids
    from dcpctl.runtime.worker import build_state
    import torch
    if max_running is None:
        return run_worker(cfg, REQUESTS)
    ps = build_state(cfg)
    model = load_model(cfg["model"]["path"], ps, cfg["decisions"], torch.float64, "cpu")
    eng = Engine(model, ps, cfg, eos_token_ids(cfg["model"]["path"]), max_running=max_running)
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
