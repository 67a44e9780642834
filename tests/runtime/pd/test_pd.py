"""PD disaggregation on forked gloo ranks: decode output equals the non-disaggregated DCP 1 run.

Pools start as NaN, so a decode rank that attends a row the transfer did not deliver fails loudly.
"""
import math
from dataclasses import replace

import pytest
import torch

from dcpctl.contract.fields import LaunchConfigError
from dcpctl.contract.launch_config import HiCacheSection
from dcpctl.runtime.kv import local_len
from dcpctl.runtime.kv.pool import KVPool
from dcpctl.runtime.pd import PAGE, RELAYOUT, PDError, plan_transfers, transfer_path
from dcpctl.runtime.pd.driver import run_pd
from dcpctl.runtime.pd.plan import RankInfo
from tests.dist import run_ranks
from tests.runtime.configs import config
from tests.runtime.engine.test_engine import REQUESTS, FakeMLA, launch_cfg

PROMPT_LENS = [len(r["prompt_ids"]) for r in REQUESTS]  # 1 and 3 are shorter than dcp 4; 11 spans pages


def pd_cfg(pre_world, pre_dcp, dec_world, dec_dcp, page):
    def inst(world, dcp, first):
        cfg = launch_cfg(world, dcp, capacity=16, chunk=5)
        cfg["kv"]["page_size"] = page
        groups = {k: [[r + first for r in g] for g in v] for k, v in cfg["groups"].items()}
        return cfg, {"ranks": list(range(first, first + world)), "groups": groups,
                     **{k: cfg[k] for k in ("topology", "decisions", "kv")}}
    base, pre = inst(pre_world, pre_dcp, 0)
    _, dec = inst(dec_world, dec_dcp, pre_world)
    return {k: base[k] for k in ("version", "model", "device", "dist_backend")} | {
        "world_size": pre_world + dec_world,
        "disaggregation": {"transfer": transfer_path(pre_dcp, dec_dcp), "prefill": pre, "decode": dec}}


def _poisoned_pools():
    init = KVPool.__init__

    def nan_init(self, *a, **k):
        init(self, *a, **k)
        self.kv.fill_(math.nan)
    KVPool.__init__ = nan_init  # forked rank: local to this process


def _run_pd(rank, world, cfg):
    _poisoned_pools()
    return run_pd(config(cfg), REQUESTS, lambda ps, c: FakeMLA(ps, c.decisions.dcp_replicate_q_proj))


@pytest.fixture(scope="module")
def reference():
    from tests.runtime.engine.test_engine import _run
    return run_ranks(_run, 1, launch_cfg(1, 1, capacity=32), REQUESTS)[0]


@pytest.mark.parametrize("pre,dec,page", [((1, 1), (2, 2), 1), ((1, 1), (2, 2), 2), ((1, 1), (4, 4), 1),
                                          ((1, 1), (4, 4), 2), ((2, 2), (2, 2), 1), ((2, 2), (2, 2), 2)])
def test_pd_matches_plain(reference, pre, dec, page):
    cfg = pd_cfg(*pre, *dec, page)
    results = run_ranks(_run_pd, pre[0] + dec[0], cfg)
    assert all(r == results[0] for r in results[1:])
    got = results[0]
    for want, out in zip(reference["outputs"], got["outputs"]):
        assert out["output_ids"] == want["output_ids"]
        assert out["output_logprobs"] == pytest.approx(want["output_logprobs"], abs=1e-9)
    c = dec[1]
    want_rows = {}
    for i, dst in enumerate(range(pre[0], pre[0] + dec[0])):
        src = i % pre[0] if pre[1] == c else 0
        want_rows[f"{src}->{dst}"] = sum(local_len(n, i % c, c) for n in PROMPT_LENS)  # exact: no stale row
    assert got["stats"]["rows_moved"] == want_rows
    assert got["stats"]["transfer"] == (PAGE if pre[1] == c else RELAYOUT)


def test_transfer_plan_rows_and_rejections():
    pre = [RankInfo(0, 0, 1)]
    dec = [RankInfo(1 + r, r, 4) for r in range(4)]
    ts = plan_transfers(pre, dec, [3, 6])
    assert [(t.dst, t.positions) for t in ts] == [(1, (0,)), (1, (0, 4)), (2, (1,)), (2, (1, 5)), (3, (2,)),
                                                  (3, (2,)), (4, ()), (4, (3,))]
    assert ts[1].src_index == (0, 4)
    two = [RankInfo(r, r, 2) for r in range(2)]
    same = plan_transfers(two, [RankInfo(2 + r, r, 2) for r in range(2)], [5])
    assert [(t.src, t.dst, t.positions, t.src_index) for t in same] == [(0, 2, (0, 2, 4), (0, 1, 2)),
                                                                       (1, 3, (1, 3), (0, 1))]
    with pytest.raises(PDError, match=r"prefill dcp \(2\) -> decode dcp \(4\) is not supported"):
        transfer_path(2, 4)
    with pytest.raises(PDError, match=r"prefill dcp \(4\) -> decode dcp \(2\)"):
        plan_transfers([RankInfo(r, r, 4) for r in range(4)], two, [3])


def test_instance_config_and_refusals():
    cfg = config(pd_cfg(1, 1, 2, 2, 2))
    dec = cfg.instance("decode")
    assert dec.disaggregation_mode == "decode" and dec.world_size == 2 and dec.groups.dcp == ((1, 2),)
    with pytest.raises(LaunchConfigError, match=r"disaggregation.prefill.kv.page_size must be an integer"):
        config(pd_cfg(1, 1, 2, 2, "2"))
    with pytest.raises(LaunchConfigError, match="PD decode"):
        replace(dec, hicache=HiCacheSection(4))
    assert torch.isnan(torch.tensor(math.nan))  # the poison really is NaN
