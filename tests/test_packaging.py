import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_every_package_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "dcpctl").rglob("__init__.py")}
    assert on_disk - listed == set()
    assert "dcpctl.presets" in listed


def test_the_shipped_model_is_package_data():
    from fnmatch import fnmatch
    patterns = (tomllib.loads((ROOT / "pyproject.toml").read_text())
                ["tool"]["setuptools"]["package-data"]["dcpctl"])
    files = [p.relative_to(ROOT / "dcpctl").as_posix()
             for p in (ROOT / "dcpctl" / "data").rglob("*") if p.is_file()]
    assert "data/tiny-deepseek-stdlib/model.safetensors" in files
    assert [f for f in files if not any(fnmatch(f, pat) for pat in patterns)] == []


def test_every_tuning_table_is_package_data():
    from fnmatch import fnmatch
    patterns = (tomllib.loads((ROOT / "pyproject.toml").read_text())
                ["tool"]["setuptools"]["package-data"]["dcpctl.tuning"])
    tables = [p.relative_to(ROOT / "dcpctl" / "tuning").as_posix()
              for p in (ROOT / "dcpctl" / "tuning").rglob("*.json")]
    assert sorted(tables) == ["attention/device_name=NVIDIA_H200.json",
                              "fp8_gemm/device_name=NVIDIA_H100_80GB_HBM3.json",
                              "fp8_gemm/device_name=NVIDIA_H200.json", "gemm16/device_name=NVIDIA_H200.json",
                              "head_bmm/device_name=NVIDIA_H200.json",
                              "mla_tiles/device_name=NVIDIA_H200.json",
                              "perf/device_name=NVIDIA_H100_80GB_HBM3.json",
                              "perf/device_name=NVIDIA_H200.json"]
    assert [t for t in tables if not any(fnmatch(t, pat) for pat in patterns)] == []
