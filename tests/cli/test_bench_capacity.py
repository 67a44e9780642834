"""`dcpctl bench capacity` and `bench decode --attention-path paged` on CPU through CliRunner."""
import json

import pytest
from click.testing import CliRunner

from dcpctl.bench.capacity import admit, run
from dcpctl.cli.main import cli


@pytest.mark.parametrize("budget,page,length",
                         [(4096, 16, 1000), (1000, 4, 333), (512, 1, 77), (2048, 64, 9)])
def test_dcp_c_holds_c_times_the_context_within_one_page_per_request(budget, page, length):
    rows = {r["dcp"]: r for r in run(budget, page, [1, 2, 4], length)}
    for c, r in rows.items():
        assert r["longest_request"] == c * (budget // page) * page and r["longer_refused"]
        assert r["max_rows_per_rank"] <= budget
        assert r["within_one_page_per_request"], r
        # every rank is full except < one page (P rows) per admitted request and unusable free pages
        assert r["context_held"] >= c * (budget - budget % page) - r["admitted"] * page * c \
            - r["free_pages_left"] * page * c
        assert r["free_pages_left"] * page * c < -(-length // (page * c)) * page * c   # no room for one more


def test_admission_stops_when_pages_run_out():
    r = admit(64, 4, 2, 10)           # 16 pages of 8 virtual slots; 10 positions take 2 pages
    assert r["admitted"] == 8 and r["context_held"] == 80 and r["free_pages_left"] == 0


def test_bench_capacity_cli_json():
    out = CliRunner().invoke(cli, ["bench", "capacity", "--budget", "4096", "--page-size", "16",
                                   "--request-len", "1000", "--format", "json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output[out.output.index("{"):])["rows"]
    assert ([(r["dcp"], r["admitted"], r["context_vs_dcp1"]) for r in rows]
            == [(1, 4, 1.0), (2, 8, 2.0), (4, 16, 4.0)])


def test_bench_decode_paged_path_on_cpu_matches_kv_bytes():
    args = ["bench", "decode", "--tp-size", "2", "--dcp-sizes", "1,2", "--batches", "2", "--contexts", "37",
            "--steps", "1", "--warmup", "0", "--page-size", "4", "--format", "json"]
    paged = CliRunner().invoke(cli, args + ["--attention-path", "paged"])
    layout = CliRunner().invoke(cli, args + ["--attention-path", "layout"])
    assert paged.exit_code == 0 and layout.exit_code == 0, paged.output + layout.output
    p, d = (json.loads(x.output[x.output.index("{"):])["rows"] for x in (paged, layout))
    assert [r["paged"] for r in p] == [True, True] and [r["paged"] for r in d] == [False, False]
    assert [r["kv_bytes_read_per_rank"] for r in p] == [r["kv_bytes_read_per_rank"] for r in d]


def test_bench_decode_cuda_graphs_need_cuda():
    r = CliRunner().invoke(cli, ["bench", "decode", "--cuda-graphs"])
    assert r.exit_code == 2 and "--cuda-graphs needs --device cuda" in r.output
