"""Worker: run_worker inside forked ranks, config checks, and the torchrun entry point's errors."""
import os
import subprocess
import sys

import pytest

from dcpctl.runtime.parallel import ParallelState
from dcpctl.runtime.worker import run_worker
from tests.dist import run_ranks
from tests.runtime.configs import config
from tests.runtime.engine.test_engine import REQUESTS, FakeMLA, launch_cfg


def _fake_worker(rank, world, cfg):
    ps = ParallelState.build(cfg["groups"], cfg["topology"]["attn_dp_size"])
    return run_worker(config(cfg), REQUESTS[:2], model=FakeMLA(ps, cfg["decisions"]["dcp_replicate_q_proj"]))


def test_run_worker_result_shape():
    out = run_ranks(_fake_worker, 2, launch_cfg(2, 2, backend="a2a"))[0]
    assert set(out) == {"outputs", "stats"}
    assert set(out["outputs"][0]) == {"prompt_ids", "output_ids", "output_logprobs"}
    assert out["stats"]["kv_rows_per_rank"] == [2 + 5, 2 + 4]  # KV lengths 4 and 9 over 2 ranks


def test_topology_mismatch_is_an_equation():
    cfg = launch_cfg(2, 2)
    cfg["topology"]["dcp_size"] = 1
    with pytest.raises(RuntimeError, match=r"size of its dcp group \(2\) != topology.dcp_size \(1\)"):
        run_ranks(_fake_worker, 2, cfg)


def test_main_reports_one_line_per_rank():
    env = {k: v for k, v in os.environ.items() if not k.startswith("DCPCTL_")}
    env.update(RANK="0", OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-m", "dcpctl.runtime.worker"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 1
    assert (p.stderr.strip()
            == "[rank 0] LaunchConfigError: environment variable DCPCTL_LAUNCH_CONFIG is not set")
