import xml.etree.ElementTree as ET

import pytest

from dcpctl.plan.recommend import crossover
from dcpctl.plan.cost import Choice
from dcpctl.plan.series import crossover_series
from tests.plot.helpers import PNG_MAGIC, recommended

pytest.importorskip("matplotlib")
from dcpctl.plot.crossover import crossover_figure, save_crossover  # noqa: E402
from dcpctl.plot.output import save  # noqa: E402

K3 = dict(preset="kimi-k3-32gpu-dpa-dcp8")  # context_len 262144 from the preset


@pytest.fixture(scope="module")
def k3():
    contexts = [32768, 262144]
    req, k, result = recommended(contexts, 32, **K3)
    return req, k, result, crossover_series(req, k, result, contexts)


def curves(ax):
    return [line for line in ax.lines if line.get_gid() == "choice-curve"]


def test_one_panel_per_context_with_one_curve_per_valid_choice(k3):
    *_, series = k3
    fig = crossover_figure(series)
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title().split(" (")[0] for ax in panels] == ["context 32,768", "context 262,144"]
    for ax, p in zip(panels, series["panels"]):
        valid = [c["choice"] for c in p["curves"] if c["valid"]]
        # Kimi K3 keeps a backend the user sets (SGLang 0.5.23): every backend per DCP size
        assert valid == ["dcp 1"] + [f"dcp {c} {b}" for c in (2, 4, 8)
                                     for b in ("ag_rs", "a2a", "a2a +repQ", "fi_a2a", "fi_a2a +repQ")]
        assert [line.get_label() for line in curves(ax)] == valid
        wins = [w for w in p["wins"] if w["from"] is not None]
        assert len([line for line in ax.lines if line.get_gid() == "win-marker"]) == len(wins) == 3
    assert "(--context-len; --concurrency 32)" in panels[1].get_title()


def test_curves_end_where_each_choice_stops_fitting(k3):
    *_, series = k3
    p = series["panels"][1]
    assert p["dcp1_max_concurrency"] == 12
    for c in p["curves"]:
        if c["valid"]:
            assert c["points"][-1][0] == c["max_concurrency"] and c["points"][0][0] == 1


def test_the_picture_agrees_with_the_crossover_table(k3):
    # at each DCP size's first winning concurrency its curve is below DCP 1's or DCP 1 no longer fits
    *_, series = k3
    for p in series["panels"]:
        ms = {c["choice"]: dict(map(tuple, c["points"])) for c in p["curves"]}
        for w in p["wins"]:
            n = w["from"]
            assert n > p["dcp1_max_concurrency"] or ms[w["choice"]][n] < ms["dcp 1"][n]


def test_crossover_under_a_shared_cap():
    # Kimi K3 at 8K: the KDA state caps every choice near 181-183 requests, below which DCP wins
    # from about a hundred; probing only above DCP 1's cap (where DCP does not fit either) said "never"
    req, k, _ = recommended([8192], 1, **K3)
    n = crossover(req, Choice(8, "fi_a2a", True), 8192, k)
    assert n is not None and 64 < n < 181


def test_png_and_svg_files(k3, tmp_path):
    req, k, result, series = k3
    png, svg = tmp_path / "x.png", tmp_path / "x.svg"
    save_crossover(req, k, result, [262144], str(png))
    save(crossover_figure({**series, "panels": series["panels"][1:]}), str(svg))
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 10_000
    assert ET.parse(svg).getroot().tag == "{http://www.w3.org/2000/svg}svg"
