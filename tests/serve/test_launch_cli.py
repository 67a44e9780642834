"""`dcpctl launch` checks that run before any process starts, and --dry-run."""
from click.testing import CliRunner

from dcpctl.cli.main import cli


def _run(*args):
    return CliRunner().invoke(cli, ["launch", *args], env={"DCPCTL_API_KEY": None})


def test_non_loopback_needs_an_api_key():
    r = _run("--host", "0.0.0.0")
    assert r.exit_code == 2
    assert "--host 0.0.0.0 is not a loopback address: pass --api-key KEY" in r.output


def test_dry_run_prints_config_and_torchrun():
    r = _run("--dry-run", "--host", "0.0.0.0")  # nothing binds, so no key is needed
    assert r.exit_code == 0, r.output
    assert "dist_backend: gloo" in r.output and "torch.distributed.run" in r.output


def test_node_rank_must_be_below_nnodes():
    r = _run("--nnodes", "1", "--node-rank", "1")
    assert r.exit_code == 2 and "--node-rank (1) must be < nnodes (1)" in r.output
