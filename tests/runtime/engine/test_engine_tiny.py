"""The bundled tiny DeepSeek-V3 checkpoint through run_worker: every layout equals DCP = 1 (float64)."""
import json
import os
import socket
import subprocess
import sys

import pytest
import yaml

from dcpctl.runtime.worker import run_worker
from tests.dist import run_ranks
from tests.runtime.configs import config
from tests.runtime.engine.test_engine import _expected_rows, launch_cfg

tiny = pytest.importorskip("dcpctl.runtime.tiny")

REQUESTS = [  # shorter than dcp, equal to dcp 4, longer than a prefill chunk (6), sampled
    {"prompt_ids": [3], "max_new_tokens": 4, "logprobs": True},
    {"prompt_ids": [11, 2, 7, 30], "max_new_tokens": 5, "logprobs": True},
    {"prompt_ids": [5, 9, 14, 2, 8, 40, 6, 1, 17, 22, 3, 9, 12], "max_new_tokens": 3, "logprobs": True},
    {"prompt_ids": [21, 4, 8], "max_new_tokens": 4, "temperature": 0.7, "top_k": 20, "top_p": 0.9,
     "seed": 5, "logprobs": True},
]


def _cfg(world, dcp, dp=1, backend="ag_rs", rep_q=False, base="e"):
    cfg = launch_cfg(world, dcp, dp, backend, rep_q, capacity=64, chunk=6, lse_base=base)
    cfg["model"]["path"] = str(tiny.ensure_tiny_model())
    return cfg


def _run(rank, world, cfg):
    return run_worker(config(cfg), REQUESTS)


@pytest.fixture(scope="module")
def reference():
    return run_ranks(_run, 1, _cfg(1, 1))[0]


CASES = [  # (world, dcp, attn_dp, backend, replicated q, lse base)
    (2, 2, 1, "ag_rs", False, "e"),
    (2, 2, 1, "a2a", True, "2"),
    (4, 4, 1, "a2a", False, "e"),
    (4, 4, 1, "ag_rs", True, "2"),
    (4, 2, 2, "a2a", False, "e"),      # attention DP: two replicas of DCP 2
]


@pytest.mark.parametrize("world,dcp,dp,backend,rep_q,base", CASES)
def test_tiny_matches_dcp1(reference, world, dcp, dp, backend, rep_q, base):
    got = run_ranks(_run, world, _cfg(world, dcp, dp, backend, rep_q, base))[0]
    for want, out in zip(reference["outputs"], got["outputs"]):
        assert out["output_ids"] == want["output_ids"]
        assert out["output_logprobs"] == pytest.approx(want["output_logprobs"], abs=1e-9)
    assert got["stats"]["kv_rows_per_rank"] == _expected_rows(got["outputs"], world, dcp, dp)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_torchrun_entry_point(reference, tmp_path):
    cfg = _cfg(2, 2, backend="a2a")
    (tmp_path / "launch.yaml").write_text(yaml.safe_dump(cfg))
    (tmp_path / "requests.json").write_text(json.dumps(REQUESTS[:3]))
    env = dict(os.environ, OMP_NUM_THREADS="1", DCPCTL_LAUNCH_CONFIG=str(tmp_path / "launch.yaml"),
               DCPCTL_REQUESTS=str(tmp_path / "requests.json"), DCPCTL_RESULT=str(tmp_path / "out.json"))
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr",
            "127.0.0.1", "--master-port", str(_free_port()), "-m", "dcpctl.runtime.worker"]
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads((tmp_path / "out.json").read_text())
    assert [o["output_ids"] for o in out["outputs"]] == [o["output_ids"] for o in reference["outputs"][:3]]
    assert len(out["stats"]["kv_rows_per_rank"]) == 2


def test_greedy_matches_transformers(reference):
    transformers = pytest.importorskip("transformers")
    import torch
    model = transformers.AutoModelForCausalLM.from_pretrained(str(tiny.ensure_tiny_model()),
                                                              dtype=torch.float64,
                                                              experts_implementation="eager")
    for req, out in list(zip(REQUESTS, reference["outputs"]))[:3]:
        ids = torch.tensor([req["prompt_ids"] + out["output_ids"]])
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits[0].double(), -1)
        n = len(req["prompt_ids"])
        steps = range(n - 1, n - 1 + len(out["output_ids"]))
        assert out["output_ids"] == [int(logp[i].argmax()) for i in steps]
        assert out["output_logprobs"] == pytest.approx([float(logp[i, t])
                                                        for i, t in zip(steps, out["output_ids"])],
                                                       abs=1e-5)  # HF keeps some fp32 (rope)
