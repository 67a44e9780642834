import json

import pytest
from click.testing import CliRunner

from dcpctl.cli.main import cli
from tests.plot.helpers import PNG_MAGIC


def test_bad_picture_fails_before_the_benchmark_runs(tmp_path):
    for path, msg in [(tmp_path / "x.pdf", "must end in .png or .svg"),
                      (tmp_path / "missing" / "x.png", "cannot write --picture")]:
        r = CliRunner().invoke(cli, ["bench", "decode", "--picture", str(path)])
        assert r.exit_code == 2 and msg in r.stderr and "bench decode:" not in r.stderr


def test_bench_decode_picture_from_measured_rows(tmp_path):
    pytest.importorskip("matplotlib")
    from dcpctl.plot.bench import decode_figure
    png, rows = tmp_path / "decode.png", tmp_path / "rows.json"
    r = CliRunner().invoke(cli, ["bench", "decode", "--tp-size", "2", "--dcp-sizes", "1,2", "--batches", "1",
                                 "--contexts", "16,32", "--steps", "1", "--warmup", "0", "-o", str(rows),
                                 "--picture", str(png)])
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 10_000
    fig = decode_figure(json.loads(rows.read_text()))
    lines = [line for line in fig.axes[0].lines if line.get_gid() == "bench-step_ms"]
    assert [line.get_label() for line in lines] == ["dcp 1 measured", "dcp 2 measured"]
    assert all(list(line.get_xdata()) == [16, 32] for line in lines)
    assert not any(line.get_gid() == "bench-predicted_ms" for line in fig.axes[0].lines)  # CPU: no roofline
