import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_every_package_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "dcpctl").rglob("__init__.py")}
    assert on_disk - listed == set()
    assert "dcpctl.presets" in listed
