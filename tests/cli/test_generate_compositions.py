"""`dcpctl generate` with PD disaggregation (both instances in one launch) and with the HiCache
host tier equals the plain run (float64 greedy ids), through the real torchrun launch."""
import json
import subprocess
import sys

import pytest

BASE = ["--prompt-ids", "1,2,3", "--prompt-ids", "4,5,6,7,8", "--dtype", "float64", "--max-new-tokens", "4",
        "--format", "json", "--tp-size", "2", "--dcp-size", "2", "--logprobs"]


def gen(*extra):
    p = subprocess.run([sys.executable, "-m", "dcpctl.cli.main", "generate", *BASE, *extra],
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


@pytest.fixture(scope="module")
def plain():
    return gen()


@pytest.mark.parametrize("extra", [
    ("--disaggregation-mode", "decode", "--disaggregation-peer-dcp-size", "1"),
    ("--enable-hierarchical-cache",),
])
def test_composition_equals_plain(plain, extra):
    got = gen(*extra)
    for a, b in zip(plain["outputs"], got["outputs"]):
        assert a["output_ids"] == b["output_ids"]
        assert a["output_logprobs"] == pytest.approx(b["output_logprobs"], abs=1e-9)


def test_pd_unsupported_sizes_exit_2():
    p = subprocess.run([sys.executable, "-m", "dcpctl.cli.main", "generate", *BASE, "--tp-size", "4",
                        "--dcp-size", "4", "--disaggregation-mode", "decode",
                        "--disaggregation-peer-dcp-size", "2"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "prefill dcp (2) -> decode dcp (4) is not supported" in p.stderr
