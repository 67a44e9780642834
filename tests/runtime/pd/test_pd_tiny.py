"""PD with the bundled tiny DeepSeek-V3 checkpoint, rendered from two real plans (docs/pd.md)."""
import json

import pytest

from dcpctl.launch.pd import render_pd_launch_config
from dcpctl.plan.errors import UserError
from dcpctl.plan.model import spec_from_config
from dcpctl.plan.planner import make_plan
from dcpctl.plan.request import PlanRequest
from dcpctl.plan.topology import Topology
from dcpctl.runtime.pd.driver import run_pd
from dcpctl.runtime.worker import run_worker
from tests.dist import run_ranks
from tests.plan.helpers import hw
from tests.runtime.configs import config
from tests.runtime.engine.test_engine_tiny import REQUESTS, _cfg

tiny = pytest.importorskip("dcpctl.runtime.tiny")


def _plan(tp, dcp, mode, peer, page=2):
    spec = spec_from_config(json.loads((tiny.ensure_tiny_model() / "config.json").read_text()))
    return make_plan(PlanRequest(topology=Topology(tp_size=tp, dcp_size=dcp), model=spec, hardware=hw("cpu"),
                                 page_size=page, dcp_comm_backend="a2a" if dcp > 1 else None,
                                 disaggregation_mode=mode, disaggregation_peer_dcp_size=peer))


def _run_pd(rank, world, cfg):
    return run_pd(cfg, REQUESTS)


def _run_plain(rank, world, cfg):
    return run_worker(config(cfg), REQUESTS)


@pytest.mark.parametrize("pre,dec", [((1, 1), (2, 2))])
def test_tiny_pd_matches_plain(pre, dec):
    want = run_ranks(_run_plain, 1, _cfg(1, 1))[0]
    cfg = render_pd_launch_config(_plan(*pre, "prefill", dec[1]), _plan(*dec, "decode", pre[1]),
                                  tiny.ensure_tiny_model(), "float64", "cpu", 64, 6)
    assert cfg.disaggregation.transfer == "token_relayout" and cfg.world_size == 3
    got = run_ranks(_run_pd, cfg.world_size, config(cfg.to_dict()))[0]  # as the worker parses launch.yaml
    for w, g in zip(want["outputs"], got["outputs"]):
        assert g["output_ids"] == w["output_ids"]
        assert g["output_logprobs"] == pytest.approx(w["output_logprobs"], abs=1e-9)


def test_render_rejects_unsupported_pairs():
    with pytest.raises(UserError, match=r"prefill dcp \(2\) -> decode dcp \(4\) is not supported"):
        render_pd_launch_config(_plan(2, 2, "null", None), _plan(4, 4, "null", None), "m", "float64", "cpu",
                                64, 6)
    with pytest.raises(UserError, match=r"prefill page_size \(1\) != decode page_size \(2\)"):
        render_pd_launch_config(_plan(1, 1, "null", None, page=1), _plan(2, 2, "null", None), "m", "float64",
                                "cpu", 64, 6)
