"""The one rule for how many HTTP worker processes serve the port (launch/http_workers.py)."""
from click.testing import CliRunner

from dcpctl.cli.main import cli
from dcpctl.launch.http_workers import http_workers


def test_given_wins_and_cpu_gets_one():
    assert http_workers(3, "cuda", 64, cpus=16)[0] == 3
    n, why = http_workers(None, "cpu", 256, cpus=64)
    assert n == 1 and "CPU" in why


def test_cuda_one_per_8_running_capped_by_cpus_and_four():
    assert [http_workers(None, "cuda", r, cpus=16)[0] for r in (1, 8, 9, 16, 32, 256)] == [1, 1, 2, 2, 4, 4]
    assert http_workers(None, "cuda", 64, cpus=8)[0] == 2 and http_workers(None, "cuda", 64, cpus=2)[0] == 1


def test_a_bad_worker_count_is_a_usage_error():
    r = CliRunner().invoke(cli, ["launch", "--tokenizer-worker-num", "0"])
    assert r.exit_code == 2 and "tokenizer-worker-num" in r.output and "Traceback" not in r.output
