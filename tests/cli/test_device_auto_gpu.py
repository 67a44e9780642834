"""`--device auto` on a machine with a GPU: launch and generate take CUDA without --device (GPU only)."""
import json

import pytest
import torch
import yaml
from click.testing import CliRunner

from dcpctl.cli.main import cli

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _launch_config(*args):
    r = CliRunner().invoke(cli, ["launch", "--dry-run", *args])
    assert r.exit_code == 0, r.output
    return yaml.safe_load(r.stdout.split("\n# node 0")[0]), r.stderr


@pytest.mark.gpu
@needs_gpu
def test_launch_takes_cuda_without_device():
    cfg, err = _launch_config("--tp-size", "1", "--dcp-size", "1")
    assert cfg["device"] == "cuda" and cfg["dist_backend"] == "nccl" and cfg["model"]["dtype"] == "bfloat16"
    assert err.count("--device auto: cuda (") == 1
    cfg, _ = _launch_config("--tp-size", "1", "--dcp-size", "1", "--device", "cpu")
    assert cfg["device"] == "cpu"


@pytest.mark.gpu
@needs_gpu
def test_launch_more_ranks_than_gpus_stays_on_cpu():
    ranks = torch.cuda.device_count() + 1
    cfg, err = _launch_config("--tp-size", str(ranks), "--dcp-size", "1")
    assert cfg["device"] == "cpu" and f"{ranks} ranks on this node" in err


@pytest.mark.gpu
@needs_gpu
def test_generate_takes_cuda_without_device():
    r = CliRunner().invoke(cli, ["generate", "--tp-size", "1", "--dcp-size", "1", "--prompt-ids", "1,2,3",
                                 "--max-new-tokens", "2", "--temperature", "0", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert "--device auto: cuda (" in r.stderr and json.loads(r.stdout)["outputs"][0]["output_ids"]
