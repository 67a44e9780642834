import json

from click.testing import CliRunner

from dcpctl.cli.main import cli


def test_bench_decode_cpu_kv_bytes_fall_with_dcp():
    r = CliRunner().invoke(cli,
                           ["bench", "decode", "--tp-size", "4", "--dcp-sizes", "1,2,4", "--batches", "2",
                            "--contexts", "37", "--steps", "1", "--warmup", "0", "--format", "json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["rows"]
    by = {x["dcp"]: x for x in rows}
    row_bytes = by[1]["kv_bytes_read_per_rank"][0] // (2 * 38)  # one latent row over all layers
    for c in (2, 4):
        # per-rank KV bytes are 1/c of DCP 1 within one row per request: local_len(38) per request
        for r_, got in enumerate(by[c]["kv_bytes_read_per_rank"]):
            local = 38 // c + (r_ % c < 38 % c)
            assert got == 2 * local * row_bytes


def test_bench_decode_rejects_bad_sizes():
    r = CliRunner().invoke(cli, ["bench", "decode", "--tp-size", "4", "--dcp-sizes", "3"])
    assert r.exit_code == 2 and "must divide --tp-size (4)" in r.output
